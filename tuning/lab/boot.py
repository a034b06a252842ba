"""``fabtune lab reboot NODE``: a node's power cycle, as far as tuning can tell.

1. Live state goes back to power-on values: a fresh sysroot is built for the node
   (:func:`tuning.lab.sysroot.build_sysroot`) and only what a disk keeps is carried over
   (:data:`PERSISTENT`: ``etc/``, ``usr/``, ``boot/``, and ``hw/``: the lab's stand-in for NIC flash and other non-volatile device state). IRQ affinities, MTUs, sysctls, DCB, ECN and RDMA-CM
   values are lost, as on a real reboot; agents started by injections are not restarted.
2. Boot runs what is persisted, over the node's own SSH endpoint as root (sudo), the way
   systemd would: ``modprobe -b MODULE`` for each module of ``/etc/modules-load.d/*.conf``
   (systemd-modules-load, :func:`modules_to_load`), ``sysctl --system`` (systemd-sysctl reads
   ``/etc/sysctl.d``), then the
   ``ExecStart`` of every unit ENABLED in ``multi-user.target.wants`` (a unit file that is only
   installed does not run), in its ``WorkingDirectory`` (``/`` is the sysroot).
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from tuning.errors import CommandError, InputError
from tuning.lab import privileges
from tuning.lab.fabric import Fabric
from tuning.lab.sysroot import build_sysroot

#: sysroot folders a reboot keeps (the disk); everything else is rebuilt (procfs, sysfs, /run)
PERSISTENT = ("etc", "usr", "boot", "hw")
WANTS = "etc/systemd/system/multi-user.target.wants"
#: what the hardware and firmware do at power-on, before anything from the disk runs ("module:function"
#: called with ``(sysroot: Path, node: Node)`` on the fresh sysroot, the PERSISTENT folders already
#: in place): NIC firmware makes its "Next Boot" values current, the boot loader puts the
#: configured command line in ``/proc/cmdline``
POWER_ON_HOOKS: list[str] = [
    # part A (firmware)
    "tuning.lab.hw_nic:power_on",
    # part C (kernel, power)
    "tuning.lab.hw_cpu:power_on",
    # part D (modules, PCIe, pause)
    "tuning.lab.hw_pci:power_on",
]


def reset_volatile(sysroot: Path, node) -> None:
    """Rebuild ``sysroot`` at power-on values, keeping the :data:`PERSISTENT` folders."""
    fresh = sysroot.with_name(sysroot.name + ".boot")
    if fresh.exists():
        shutil.rmtree(fresh)
    build_sysroot(fresh, node)
    debug = fresh / "sys" / "kernel" / "debug"
    if debug.is_dir():
        debug.chmod(0o700)  # debugfs is root-only, as the lab lays it out (controller._protect)
    for name in PERSISTENT:
        if (sysroot / name).exists():
            shutil.rmtree(fresh / name, ignore_errors=True)
            (sysroot / name).rename(fresh / name)
    if not sysroot.stat().st_mode & 0o200:  # the lab keeps sysroot trees read-only (user-namespace mode)
        from tuning.lab import privileges

        protect = getattr(privileges, "make_read_only", None)
        if protect is not None:
            protect(fresh)
    for target in POWER_ON_HOOKS:
        module, _, func = target.partition(":")
        getattr(__import__(module, fromlist=[func]), func)(fresh, node)
    old = sysroot.with_name(sysroot.name + ".old")
    sysroot.rename(old)
    fresh.rename(sysroot)
    _remove(old)


def _remove(tree: Path) -> None:
    """Delete a tree, read-only folders included."""
    for folder, dirs, _ in os.walk(tree):
        for name in dirs:
            path = Path(folder) / name
            if not path.is_symlink():
                path.chmod(0o755)
    tree.chmod(0o755)
    shutil.rmtree(tree, ignore_errors=True)


def _unit_exec(unit_file: Path) -> tuple[str, str]:
    """(ExecStart command, WorkingDirectory) of a unit file (``/`` when not set)."""
    execs, workdir = "", "/"
    for line in unit_file.read_text().splitlines():
        key, _, value = line.strip().partition("=")
        if key == "ExecStart":
            execs = value.lstrip("-@")
        elif key == "WorkingDirectory":
            workdir = value
    return execs, workdir


#: where systemd-modules-load looks, in precedence order (modules-load.d(5); a file name in an earlier
#: folder hides the same name in a later one)
MODULES_LOAD_DIRS = ("etc/modules-load.d", "run/modules-load.d", "usr/local/lib/modules-load.d",
                     "usr/lib/modules-load.d", "lib/modules-load.d")


def modules_to_load(sysroot: Path) -> list[str]:
    """The modules ``systemd-modules-load`` loads at boot (owner: part D): every ``*.conf`` of
    :data:`MODULES_LOAD_DIRS`, one module per line, ``#`` and ``;`` start comments, files read in
    file-name order across the folders; each module once. It runs before ``systemd-sysctl``."""
    files: dict[str, Path] = {}
    for folder in MODULES_LOAD_DIRS:
        base = sysroot / folder
        for conf in sorted(base.glob("*.conf")) if base.is_dir() else []:
            files.setdefault(conf.name, conf)
    out: list[str] = []
    for name in sorted(files):
        for line in files[name].read_text(errors="replace").splitlines():
            module = line.strip()
            if module and not module.startswith(("#", ";")) and module not in out:
                out.append(module)
    return out


def boot_commands(sysroot: Path) -> list[str]:
    """The commands boot runs, relative to the node's login folder (sysroot ``sysroot``)."""
    cmds = [f"modprobe -b {shlex.quote(m)}" for m in modules_to_load(sysroot)]
    cmds.append("sysctl -q --system")
    wants = sysroot / WANTS
    for link in sorted(wants.iterdir()) if wants.is_dir() else []:
        unit = sysroot / "etc/systemd/system" / link.name  # links point at /etc/systemd/system/UNIT
        if not link.is_symlink() or not unit.is_file():
            continue
        execs, workdir = _unit_exec(unit)
        if execs:
            program = "sysroot/" + execs.split()[0].lstrip("/")
            cwd = "sysroot/" + workdir.lstrip("/")
            cmds.append(f"(cd {shlex.quote(cwd)} && {shlex.quote('../' * (cwd.rstrip('/').count('/') + 1) + program)}"
                        f" {' '.join(shlex.quote(a) for a in execs.split()[1:])})")
    return cmds


def reboot(state_dir: Path | str, name: str, connection) -> list[str]:
    """Power-cycle lab node ``name`` and boot it from what it persisted.

    Args:
        state_dir: the lab state folder.  name: the node.
        connection: a :class:`tuning.inventory.Connection` of the node (become: root via sudo).

    Returns:
        The boot commands that ran.

    Raises:
        InputError: not a node of the lab.  CommandError: a boot command failed (its text).
    """
    from tuning.transport.ssh import SshHost

    state_dir = Path(state_dir)
    fabric = Fabric.load(state_dir / "fabric.json")
    nodes = {n.name: n for n in fabric.nodes}
    if name not in nodes:
        raise InputError("NODE", "node", f"{name!r} is not a lab node; allowed: {', '.join(nodes)}")
    sysroot = state_dir / "nodes" / name / "sysroot"
    privileges.require_write_access(sysroot, "fabtune lab reboot")
    reset_volatile(sysroot, nodes[name])
    cmds = boot_commands(sysroot)
    host = SshHost(name, connection)
    try:
        for cmd in cmds:
            res = host.run(cmd)
            if res.rc != 0:
                raise CommandError(cmd, res.rc, res.stderr or res.stdout, host=name, phase="boot")
    finally:
        host.close()
    return cmds
