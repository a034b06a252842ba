"""Kernel modules: nvidia-peermem (GPUDirect RDMA) loaded now and at boot, and registered with the RDMA core.

Live state is ``/proc/modules`` (kernel ``m_show`` format, the file ``lsmod`` prints): a line
``nvidia_peermem ...`` means loaded; the legacy Mellanox module ``nv_peer_mem`` counts as loaded
too (the value says which). Being listed is not enough: the module must register its peer-memory
client with ib_core, which then shows ``/sys/kernel/mm/memory_peers/nv_mem/version`` (MLNX_OFED
``ib_peer_mem.c``). An nvidia-peermem built before MLNX_OFED/DOCA was installed loads and does
nothing: that is a finding (``peermem-unregistered``), not a change fabtune can make.

At boot, ``systemd-modules-load`` loads the modules named in ``/etc/modules-load.d/*.conf``
(``modules-load.d(5)``: one module per line, ``#``/``;`` comments); fabtune owns
``/etc/modules-load.d/fabtune-nvidia-peermem.conf``. Live and persisted are two keys, so a plan
shows each: ``module/nvidia_peermem`` = ``loaded`` | ``loaded (nv_peer_mem)`` | ``unloaded``
(``modprobe nvidia_peermem`` / ``modprobe -r``), ``module/nvidia_peermem/boot`` = ``present`` (the
file holds fabtune's line) | ``absent`` | ``custom:<base64>`` (a file of other content, put back as it was).

Example profile::

    modules: {nvidia_peermem: true}    # false: unloaded and not loaded at boot; absent: left alone
"""

from __future__ import annotations

import base64
import binascii

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, Finding, NodeFacts, Unfit, cat_cmd, decode
from tuning.transport.base import q, sysroot_path

MODULE, LEGACY = "nvidia_peermem", "nv_peer_mem"
KEY, BOOT_KEY = f"module/{MODULE}", f"module/{MODULE}/boot"
BOOT_FILE = "/etc/modules-load.d/fabtune-nvidia-peermem.conf"
#: what fabtune writes there (modules-load.d(5))
BOOT_CONF = "# fabtune: load nvidia-peermem (GPUDirect RDMA peer memory) at boot\nnvidia_peermem\n"
PEER_VERSION = "/sys/kernel/mm/memory_peers/nv_mem/version"
_RAW_MODULES, _RAW_PEER, _RAW_BOOT = "module/proc_modules", "module/nv_mem_version", "module/boot_conf"


def loaded_state(proc_modules: str) -> str:
    """``loaded`` / ``loaded (nv_peer_mem)`` / ``unloaded`` from ``/proc/modules`` text."""
    names = {line.split(" ", 1)[0] for line in proc_modules.splitlines() if line}
    if MODULE in names:
        return "loaded"
    return f"loaded ({LEGACY})" if LEGACY in names else "unloaded"


def boot_state(content: str) -> str:
    """``present`` / ``absent`` / ``custom:<base64>`` of the modules-load.d file (content ABSENT: no file)."""
    if content == ABSENT:
        return "absent"
    if content == BOOT_CONF:
        return "present"
    return "custom:" + base64.b64encode(content.encode()).decode()


def peermem_status(raw: dict[str, str]) -> dict[str, str | None]:
    """What the read found: ``{"module": "loaded"|..., "registered": "<nv_mem version>" | None}``
    (``module`` None when ``/proc/modules`` could not be read)."""
    mods = decode(raw.get(_RAW_MODULES, ABSENT))
    version = raw.get(_RAW_PEER, ABSENT)
    return {"module": None if mods == ABSENT else loaded_state(mods),
            "registered": None if version in (ABSENT, "") else version}


class ModulesDomain(Domain):
    """Keys ``module/nvidia_peermem`` (live) and ``module/nvidia_peermem/boot`` (modules-load.d)."""

    name = "modules"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        s = lambda p: q(sysroot_path(sysroot, p))  # noqa: E731
        return [f"rb {_RAW_MODULES} {s('/proc/modules')}", f"r {_RAW_PEER} {s(PEER_VERSION)}",
                f"rb {_RAW_BOOT} {s(BOOT_FILE)}"]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.modules.nvidia_peermem is None:
            return {}
        mods = decode(facts.raw.get(_RAW_MODULES, ABSENT))
        return {KEY: ABSENT if mods == ABSENT else loaded_state(mods),
                BOOT_KEY: boot_state(decode(facts.raw.get(_RAW_BOOT, ABSENT)))}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        want = spec.modules.nvidia_peermem
        if want is None:
            return {}
        if facts.raw and facts.raw.get(_RAW_MODULES, ABSENT) == ABSENT:
            raise Unfit("modules.nvidia_peermem", "/proc/modules cannot be read on this node, so the module "
                                                  "state cannot be snapshotted")
        if not want:
            return {KEY: "unloaded", BOOT_KEY: "absent"}
        have = self.current(spec, facts).get(KEY, "")
        return {KEY: have if have.startswith("loaded") else "loaded", BOOT_KEY: "present"}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None
        if key == KEY:
            if value == "unloaded":  # whichever of the two is loaded when the command runs
                mods = q(sysroot_path(sysroot, "/proc/modules"))
                return (f"awk '$1==\"{MODULE}\"||$1==\"{LEGACY}\"{{print $1}}' {mods} | "
                        "xargs -r modprobe -r")
            return f"modprobe {LEGACY if value == f'loaded ({LEGACY})' else MODULE}"
        target = q(sysroot_path(sysroot, BOOT_FILE))
        if value == "absent":
            return f"rm -f {target}"
        content = BOOT_CONF if value == "present" else _custom(value)
        data = base64.b64encode(content.encode()).decode()
        return f"printf %s {data} | base64 -d > {target} && chmod 0644 {target}"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        if key == KEY:
            return cat_cmd(sysroot, "/proc/modules")
        path = q(sysroot_path(sysroot, BOOT_FILE))
        return f"if [ -f {path} ]; then base64 -w0 {path}; fi"

    def parse_read(self, key: str, output: str) -> str:
        if key == KEY:
            return loaded_state(output)
        text = output.strip()
        return boot_state(base64.b64decode(text).decode(errors="replace") if text else ABSENT)

    def same(self, have: str, want: str) -> bool:
        """Exact: a legacy ``loaded (nv_peer_mem)`` is what a profile that keeps it wants (see desired)."""
        return have == want

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """``peermem-unregistered`` (listed by lsmod, no ``memory_peers/nv_mem``) and ``peermem-legacy``;
        reported whatever the profile says."""
        st = peermem_status(facts.raw)
        out = []
        if st["module"] and st["module"].startswith("loaded") and st["registered"] is None:
            name = MODULE if st["module"] == "loaded" else LEGACY
            out.append(Finding(device, self.name, "peermem-unregistered",
                               f"{name} is loaded (lsmod lists it) but not registered with the RDMA core "
                               f"({PEER_VERSION} is missing): GPUDirect RDMA will not use GPU memory; rebuild "
                               "nvidia-peermem against the installed MLNX_OFED/DOCA (or reinstall the NVIDIA driver "
                               "after it) and reload it",
                               f"/proc/modules: {name} listed; {PEER_VERSION}: absent"))
        if st["module"] == f"loaded ({LEGACY})":
            out.append(Finding(device, self.name, "peermem-legacy",
                               f"the legacy {LEGACY} module provides GPU peer memory; nvidia-peermem (NVIDIA driver "
                               "470 and later) replaces it", f"/proc/modules: {LEGACY} listed"))
        return out


def _custom(value: str) -> str:
    """The file content a ``custom:<base64>`` value carries. Raises ValueError for a bad value."""
    try:
        return base64.b64decode(value.split(":", 1)[1], validate=True).decode()
    except (IndexError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a modules-load.d value: {value!r}") from None
