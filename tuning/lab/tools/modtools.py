"""Stand-ins of kmod's ``modprobe`` and ``lsmod`` on a lab node (kmod 30). Stdlib only.

The loaded modules are the sysroot's ``proc/modules``, in the kernel's format
(``kernel/module/procfs.c`` ``m_show``: ``name size refcount holders state address [taints]``,
holders ``a,b,`` or ``-``, newest module first) and ``lsmod`` is a reader of it (kmod
``tools/lsmod.c``: ``Module                  Size  Used by`` then ``%-19s %8ld  %d`` and the holders).

``modprobe MOD`` loads a module the lab knows (:data:`MODULES`) with its dependencies: it is put
at the top of ``proc/modules`` and every dependency's refcount and holder list grow (holders are
prepended, as ``add_module_usage`` does); ``modprobe -r MOD`` reverses exactly that, so load then
unload gives back the original bytes. A peer-memory client (``nvidia_peermem``, legacy
``nv_peer_mem``) registers with the RDMA core at load: ``sys/kernel/mm/memory_peers/nv_mem/``
with ``version`` and the counters of MLNX_OFED's ``ib_peer_mem.c`` (the folder goes when the last
client goes). The lab fault ``hw/lab-faults/peermem.json`` ``{"registers": false}`` makes it load
without registering, as an nvidia-peermem built before MLNX_OFED was installed does (it is listed
by lsmod, yet GPUDirect RDMA does not work).

Texts (kmod ``tools/modprobe.c`` and ``tools/log.c``; ``LOG`` is priority FATAL, ``ERR`` ERROR),
all on stderr with exit 1: ``modprobe: ERROR: could not insert 'M': Operation not permitted`` and
``modprobe: ERROR: could not remove 'M': Operation not permitted`` (no root),
``modprobe: FATAL: Module M not found in directory /lib/modules/<release>``,
``modprobe: FATAL: Module M is in use.``. Loading a loaded module and removing one that is not
loaded are silent successes (no ``--first-time``). ``-`` and ``_`` in a name are the same.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tuning.lab.fabric import KERNEL_RELEASE  # the kernel release the lab's modprobe names in its "not found" text
from tuning.lab.sudo import is_privileged
from tuning.lab.tools.node import _sysroot  # the node's sysroot ($FABTUNE_LAB_SYSROOT), one helper for all stand-ins

#: the NVIDIA driver version (nvidia-peermem's DRV_VERSION is NV_VERSION_STRING)
NV_VERSION = "550.90.07"
PEER_COUNTERS = ("num_alloc_mrs", "num_dealloc_mrs", "num_reg_pages", "num_dereg_pages",
                 "num_reg_bytes", "num_dereg_bytes", "num_free_callbacks")
#: modules the lab can load: name -> (size, dependencies, taint flags of an OFED node, peer client)
MODULES: dict[str, tuple[int, tuple[str, ...], str, bool]] = {
    "nvidia_peermem": (16384, ("nvidia", "ib_core"), "(OE)", True),
    "nv_peer_mem": (16384, ("nvidia", "ib_core"), "(OE)", True),
}
#: what a lab node has loaded at power-on (udev loads the drivers of its devices), newest first:
#: name, size, holders, taints of an OFED node ("" on an inbox node for the in-tree RDMA modules)
BOOT_MODULES: list[tuple[str, int, tuple[str, ...], str]] = [
    ("nvidia_uvm", 4911104, (), "(POE)"),
    ("nvidia_drm", 122880, (), "(POE)"),
    ("nvidia_modeset", 1355776, ("nvidia_drm",), "(POE)"),
    ("nvidia", 54435840, ("nvidia_uvm", "nvidia_modeset"), "(POE)"),
    ("rdma_ucm", 45056, (), "(OE)"),
    ("rdma_cm", 135168, ("rdma_ucm",), "(OE)"),
    ("iw_cm", 53248, ("rdma_cm",), "(OE)"),
    ("ib_ipoib", 155648, (), "(OE)"),
    ("ib_cm", 131072, ("rdma_cm", "ib_ipoib"), "(OE)"),
    ("ib_umad", 36864, (), "(OE)"),
    ("mlx5_ib", 483328, (), "(OE)"),
    ("ib_uverbs", 184320, ("rdma_ucm", "mlx5_ib"), "(OE)"),
    ("ib_core", 434176, ("rdma_ucm", "rdma_cm", "iw_cm", "ib_ipoib", "ib_cm", "ib_umad", "mlx5_ib", "ib_uverbs"),
     "(OE)"),
    ("mlx5_core", 2441216, ("mlx5_ib",), "(OE)"),
    ("mlxfw", 36864, ("mlx5_core",), "(OE)"),
    ("psample", 20480, ("mlx5_core",), ""),
    ("tls", 151552, ("mlx5_core",), ""),
    ("pci_hyperv_intf", 12288, ("mlx5_core",), ""),
]
PEER_FAULT = "hw/lab-faults/peermem.json"


def module_line(name: str, size: int, holders: list[str], taints: str, address: int) -> str:
    """One ``/proc/modules`` line (``m_show``): ``name size refcnt holders, Live 0x... [taints]``."""
    used = "".join(h + "," for h in holders) or "-"
    return f"{name} {size} {len(holders)} {used} Live 0x{address:016x}" + (f" {taints}" if taints else "")


def boot_modules(inbox: bool) -> str:
    """``/proc/modules`` of a lab node at power-on (``inbox``: in-tree RDMA stack, no taint flags)."""
    lines = []
    for i, (name, size, holders, taints) in enumerate(BOOT_MODULES):
        if inbox and taints == "(OE)":
            taints = ""
        lines.append(module_line(name, size, list(holders), taints, 0xFFFFFFFFC0800000 + 0x7A000 * (40 - i)))
    return "\n".join(lines) + "\n"


#: the module list with load addresses, root only (0600, volatile): ``proc/modules`` itself shows
#: ``0x0000000000000000`` (``modules_open``: a reader without ``kallsyms_show_value``, i.e. the node's
#: user with the default kptr_restrict; the lab's limit: a root ``cat`` sees zeros too)
KERNEL_MODULES = "run/lab/modules"


def _read(root: Path) -> list[list[str]]:
    path = root / KERNEL_MODULES
    if not (is_privileged() and path.is_file()):
        path = root / "proc/modules"
    return [line.split(" ") for line in path.read_text().splitlines() if line]


def _replace(path: Path, text: str, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    tmp.replace(path)


def write_modules(root: Path, text: str) -> None:
    """Store the module list ``text`` (``/proc/modules`` lines with addresses): whole in
    :data:`KERNEL_MODULES` (0600), addresses zeroed in ``proc/modules`` (0444, as procfs shows it)."""
    private = root / KERNEL_MODULES
    private.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _replace(private, text, 0o600)
    hidden = "".join(" ".join(r[:5] + ["0x0000000000000000"] + r[6:]) + "\n"
                     for r in (line.split(" ") for line in text.splitlines() if line))
    public = root / "proc/modules"
    public.parent.mkdir(parents=True, exist_ok=True)
    _replace(public, hidden, public.stat().st_mode & 0o7777 if public.exists() else 0o444)


def _write(root: Path, rows: list[list[str]]) -> None:
    write_modules(root, "".join(" ".join(r) + "\n" for r in rows))


def _holders(row: list[str]) -> list[str]:
    return [] if row[3] == "-" else [h for h in row[3].split(",") if h]


def _set_holders(row: list[str], holders: list[str]) -> None:
    row[2], row[3] = str(len(holders)), "".join(h + "," for h in holders) or "-"


def _peers_dir(root: Path) -> Path:
    return root / "sys/kernel/mm/memory_peers"


def _registers(root: Path) -> bool:
    fault = root / PEER_FAULT
    try:
        return bool(json.loads(fault.read_text()).get("registers", True))
    except (OSError, ValueError):
        return True


def _load(root: Path, name: str) -> int:
    if name not in MODULES:
        print(f"modprobe: FATAL: Module {name} not found in directory /lib/modules/{KERNEL_RELEASE}", file=sys.stderr)
        return 1
    rows = _read(root)
    by_name = {r[0]: r for r in rows}
    if name in by_name:
        return 0  # already live: nothing to do
    if not is_privileged():
        print(f"modprobe: ERROR: could not insert '{name}': Operation not permitted", file=sys.stderr)
        return 1
    size, deps, taints, peer = MODULES[name]
    for dep in deps:
        if dep not in by_name:
            print(f"modprobe: ERROR: could not insert '{name}': Unknown symbol in module, or unknown "
                  "parameter (see dmesg)", file=sys.stderr)
            return 1
        _set_holders(by_name[dep], [name] + _holders(by_name[dep]))
    address = min(int(r[5], 16) for r in rows) - 0x5000
    new = module_line(name, size, [], taints, address).split(" ")  # out-of-tree on every node
    _write(root, [new] + rows)
    if peer and _registers(root):
        client = _peers_dir(root) / "nv_mem"
        client.mkdir(parents=True, exist_ok=True)
        for fname, value in [("version", NV_VERSION)] + [(c, "0") for c in PEER_COUNTERS]:
            (client / fname).write_text(f"{value}\n")
            (client / fname).chmod(0o444)  # read-only attributes (even root's write: EACCES)
    return 0


def _remove(root: Path, name: str) -> int:
    rows = _read(root)
    row = next((r for r in rows if r[0] == name), None)
    if row is None:
        return 0  # not loaded: nothing to do (modprobe -r without --first-time)
    if _holders(row):
        print(f"modprobe: FATAL: Module {name} is in use.", file=sys.stderr)
        return 1
    if not is_privileged():
        print(f"modprobe: ERROR: could not remove '{name}': Operation not permitted", file=sys.stderr)
        return 1
    rows.remove(row)
    for other in rows:
        held = _holders(other)
        if name in held:
            _set_holders(other, [h for h in held if h != name])
    _write(root, rows)
    if name in MODULES and MODULES[name][3]:
        client = _peers_dir(root) / "nv_mem"
        if client.is_dir():
            for f in client.iterdir():
                f.unlink()
            client.rmdir()
        peers = _peers_dir(root)
        if peers.is_dir() and not any(peers.iterdir()):
            peers.rmdir()
    return 0


def modprobe(argv: list[str]) -> int:
    """``modprobe [-q] [-a] MOD...`` / ``modprobe -r [-q] MOD...`` (see the module docstring)."""
    remove, quiet, names = False, False, []
    for arg in argv:
        if arg in ("-r", "--remove"):
            remove = True
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg in ("-a", "--all", "-b", "--use-blacklist"):
            continue
        elif arg.startswith("-"):
            print(f"fabtune lab: modprobe supports [-r] [-q] [-a] [-b] MODULE..., not {arg!r}", file=sys.stderr)
            return 1
        else:
            names.append(arg.replace("-", "_"))
    if not names:
        print("modprobe: ERROR: missing parameters. See -h.", file=sys.stderr)
        return 1
    root = _sysroot()
    for name in names:
        if quiet and not remove and name not in MODULES:
            return 1
        rc = _remove(root, name) if remove else _load(root, name)
        if rc:
            return rc
    return 0


def lsmod(argv: list[str]) -> int:
    """``lsmod``: the ``proc/modules`` table as kmod prints it."""
    if argv:
        print("Usage: lsmod", file=sys.stderr)
        return 1
    print("Module                  Size  Used by")
    for row in _read(_sysroot()):
        line = f"{row[0]:<19} {int(row[1]):>8}  {row[2]}"
        held = _holders(row)
        if held:
            line += " " + ",".join(held)
        print(line)
    return 0
