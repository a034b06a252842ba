"""Issue 7 stand-ins as the node's unprivileged user, the lab's kernel refusals, and inventory strings
with shell metacharacters in every new key (tester 4: unprivileged and lab fidelity).

Each expectation is the real tool's or kernel's, from its source (cited per test):

- mstflint (``Mellanox/mstflint``): ``mlxconfig/mlxcfg_commander.cpp`` ("Failed to open the device"),
  ``mlxfwupdate/mlnx_dev.cpp`` ``MlnxDev::query`` ("User is Not Root") + ``mlxfwmanager.cpp``
  ("-E- Failed to query %s device, error : %s"), ``small_utils/mstfwreset.py`` ``main`` (root check
  before argparse, "-E- Only root user can run this tool.", return 1);
- pciutils v3.10.0 ``setpci.c`` (``parse_op``: range check before alignment, ``Invalid mask``;
  ``parse_register``: ``CAPxx``/``ECAPxxx``), ``lib/sysfs.c`` (``sysfs_setup`` warns "Cannot open
  %s" once per access; a failed write returns 0 and setpci ignores it: exit 0);
- kmod ``tools/modprobe.c`` / ``libkmod-module.c`` (insert / remove texts);
- ethtool ``netlink/pause.c`` ``nl_spause`` (exit 76) and the kernel's genetlink, which checks
  ``GENL_UNS_ADMIN_PERM`` of ETHTOOL_MSG_PAUSE_SET before the request's device is looked up;
- linux ``tools/power/cpupower/utils/cpupower.c`` (``needs_root``), GRUB ``util/grub-mkconfig.in``;
- linux ``kernel/module/procfs.c`` (``modules_open``: addresses 0 for a reader without
  ``kallsyms_show_value``), ``drivers/pci/pci-sysfs.c`` ``pci_read_config`` (64 bytes without
  CAP_SYS_ADMIN), ``drivers/cpufreq/cpufreq.c`` (``store_scaling_governor``: ``sscanf("%15s")`` +
  ``strncasecmp``; ``show_scaling_governor`` prints the canonical name and a newline),
  ``mm/hugetlb.c`` (``kstrtoul(buf, 10)``: -ERANGE on overflow).

No lab daemon is started (one costs most of a minute on a loaded 2-core machine): one node sysroot and
the ``bin/`` wrappers are built in a tmp folder and protected as ``lab up`` protects them; the Python
stand-ins run in-process with ``is_privileged`` patched (as an unprivileged caller / as root), the
file-permission checks run as the lab's real unprivileged user. Needs root (CI) or ``make test``'s
user namespace, as the lab tests do.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

import pytest

from tests.adversarial._cli import assert_one_line, cli

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root or make test's user namespace (docs/lab.md)")

REPO = Path(__file__).resolve().parents[2]
NIC = "0000:0c:00.0"          # node01 enp12s0np0 (mlx5_0)
NIC2 = "0000:12:00.0"         # node01 enp18s0np0: the unprivileged config write (keeps NIC clean)
BRIDGE = "0000:0b:00.0"       # the PCIe switch downstream port above NIC: has ACS
EPERM_OPEN = "pcilib: Cannot open /sys/bus/pci/devices/{bdf}/config\n"
STAND_IN_MODULES = ("mlx", "pci", "modtools", "ethtool", "kernel", "topo")


class Box:
    """One lab node's state folder (``nodes/node01/sysroot`` + ``bin/``), protected as ``lab up`` does."""

    def __init__(self, state: Path):
        from tuning.lab import controller
        from tuning.lab.fabric import default_fabric
        from tuning.lab.sysroot import build_sysroot

        node = default_fabric().node("node01")
        self.state, self.login = state, state / "nodes" / "node01"
        self.root = self.login / "sysroot"
        build_sysroot(self.root, node)
        controller.write_wrappers(state / "bin")
        controller._protect(state, types.SimpleNamespace(nodes=[node]))
        self.env = {"PATH": f"{state / 'bin'}:/usr/bin:/bin", "FABTUNE_LAB_SYSROOT": str(self.root),
                    "HOME": "/", "LANG": "C.UTF-8"}

    def sh(self, script: str, privileged: bool) -> subprocess.CompletedProcess:
        """``bash -c SCRIPT`` in the node's login folder, as root or as the node's unprivileged user."""
        from tuning.lab import privileges

        argv, kw = (["bash", "-c", script], {}) if privileged else privileges.unprivileged(["bash", "-c", script])
        return subprocess.run(argv, cwd=self.login, env=self.env, capture_output=True, text=True, timeout=60,
                              **kw)

    def path(self, rel: str) -> Path:
        return self.root / rel


@pytest.fixture(scope="module")
def scratch():
    """A private folder (not pytest's tmp_path: on a shared machine its clean-up of old numbered folders
    costs more than these tests)."""
    path = Path(tempfile.mkdtemp(prefix="fabtune-t4-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def box(scratch) -> Box:
    return Box(scratch / "state")


def run_tool(box: Box, monkeypatch, privileged: bool, tool: str, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    """Stand-in ``tool`` in this process, as root or as an unprivileged caller: (rc, stdout, stderr)."""
    import importlib
    import sys

    from tuning.lab.tools import main

    monkeypatch.setenv("FABTUNE_LAB_SYSROOT", str(box.root))
    for name in STAND_IN_MODULES:
        mod = importlib.import_module(f"tuning.lab.tools.{name}")
        if hasattr(mod, "is_privileged"):
            monkeypatch.setattr(mod, "is_privileged", lambda p=privileged: p)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(tool, list(argv))
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


def snapshot(box: Box, *rels: str) -> dict[str, bytes]:
    return {r: box.path(r).read_bytes() for r in rels}


# ---- 1. privileged stand-ins refuse an unprivileged caller with the real text and exit code ---------

def test_mlxconfig_set_and_query_refused_without_root(box, monkeypatch):
    flash = f"hw/nic/{NIC}.json"
    before = snapshot(box, flash)
    rc, out, err = run_tool(box, monkeypatch, False, "mlxconfig", "-d", NIC, "-y", "set", "ADVANCED_PCI_SETTINGS=1")
    assert (rc, err) == (3, "") and "-E- Failed to open the device\n" in out, (rc, out, err)
    assert "Configurations:" not in out and "Apply new Configuration" not in out
    rc, out, err = run_tool(box, monkeypatch, False, "mlxconfig", "-d", NIC, "-e", "q")
    assert (rc, err) == (3, "") and "-E- Failed to open the device\n" in out and "LINK_TYPE_P1" not in out
    assert snapshot(box, flash) == before


def test_mlxfwmanager_query_refused_with_mstflint_text(box, monkeypatch):
    """mstflint ``MlnxDev::query``: not root -> ``_errMsg = "User is Not Root"``. mlxfwmanager's
    ``checkAndDisplayDeviceQuery1D`` returns before printing its error lines when querying
    (``if (is_query || is_query_xml) return res;``), so ``--query`` shows the device block with
    ``Failed to open device`` and nothing on stderr; with ``-u`` it prints
    ``-E- Failed to query <dev> device, error : <errmsg>``. Either way exit ERR_CODE_QUERY_FAILED (1)."""
    rc, out, err = run_tool(box, monkeypatch, False, "mlxfwmanager", "--query", "-d", NIC)
    assert rc == 1
    assert "Failed to open device" in out and "-E-" not in err, (out, err)
    rc, out, err = run_tool(box, monkeypatch, False, "mlxfwmanager", "-u", "-y", "-d", NIC)
    assert rc == 1
    assert f"-E- Failed to query {NIC} device, error : User is Not Root\n" in err, err


@pytest.mark.parametrize("argv", [("-d", NIC, "-y", "reset"), ("-d", NIC, "q"), ("--bogus",)])
def test_mlxfwreset_root_check_comes_first(box, monkeypatch, argv):
    flash = f"hw/nic/{NIC}.json"
    before = snapshot(box, flash)
    assert run_tool(box, monkeypatch, False, "mlxfwreset", *argv) == (1, "-E- Only root user can run this tool.\n", "")
    assert snapshot(box, flash) == before


def test_setpci_capability_write_without_root_finds_no_capability(box, monkeypatch):
    cfg = f"sys/bus/pci/devices/{BRIDGE}/config"
    before = snapshot(box, cfg)
    rc, out, err = run_tool(box, monkeypatch, False, "setpci", "-s", BRIDGE, "ECAP_ACS+6.w=0")
    assert (rc, out) == (1, "")
    assert err == EPERM_OPEN.format(bdf=BRIDGE) * 4 + (
        f"setpci: {BRIDGE}: Instance #0 of Extended capability 000d not found - there are no capabilities with "
        "that id.\n")
    assert snapshot(box, cfg) == before


def test_setpci_plain_register_write_as_the_node_user(box):
    """pciutils: ``COMMAND=0`` needs no capability lookup; the O_RDWR open fails once ("Cannot open"),
    ``sysfs_write`` returns 0, setpci ignores it and exits 0; the register is unchanged. The stand-in
    printed 4 warnings and died with a Python traceback (PermissionError on its temporary file)."""
    cfg = f"sys/bus/pci/devices/{NIC2}/config"
    before = snapshot(box, cfg)
    res = box.sh(f"setpci -s {NIC2[5:]} COMMAND=0", privileged=False)
    assert "Traceback" not in res.stderr, res.stderr[-600:]
    assert (res.returncode, res.stdout, res.stderr) == (0, "", EPERM_OPEN.format(bdf=NIC2))
    assert snapshot(box, cfg) == before


def test_modprobe_insert_and_remove_refused_without_root(box, monkeypatch):
    before = snapshot(box, "proc/modules")
    assert run_tool(box, monkeypatch, False, "modprobe", "nvidia-peermem") == (
        1, "", "modprobe: ERROR: could not insert 'nvidia_peermem': Operation not permitted\n")
    assert run_tool(box, monkeypatch, False, "modprobe", "-r", "mlx5_ib") == (
        1, "", "modprobe: ERROR: could not remove 'mlx5_ib': Operation not permitted\n")
    assert snapshot(box, "proc/modules") == before
    assert not box.path("sys/kernel/mm/memory_peers/nv_mem").exists()


def test_ethtool_pause_set_refused_without_cap_net_admin(box, monkeypatch):
    state = "run/lab/pause/enp12s0np0.json"
    before = snapshot(box, state)
    assert run_tool(box, monkeypatch, False, "ethtool", "-A", "enp12s0np0", "rx", "off", "tx", "off") == (
        76, "", "netlink error: Operation not permitted\n")
    assert snapshot(box, state) == before


def test_ethtool_pause_set_on_unknown_device_is_eperm_first(box, monkeypatch):
    """genetlink refuses ETHTOOL_MSG_PAUSE_SET (GENL_UNS_ADMIN_PERM) before the request's header (the
    device) is parsed: an unprivileged caller gets EPERM whatever the device name."""
    assert run_tool(box, monkeypatch, False, "ethtool", "-A", "nosuch0", "rx", "off") == (
        76, "", "netlink error: Operation not permitted\n")


@pytest.mark.parametrize("sub", [("idle-set", "-d", "3"), ("frequency-set", "-g", "performance")])
def test_cpupower_set_subcommands_need_root(box, monkeypatch, sub):
    before = snapshot(box, "sys/devices/system/cpu/cpu0/cpuidle/state3/disable")
    assert run_tool(box, monkeypatch, False, "cpupower", *sub) == (
        1, "", f"Subcommand {sub[0]} needs root privileges\n")
    assert snapshot(box, "sys/devices/system/cpu/cpu0/cpuidle/state3/disable") == before


def test_update_grub_needs_root(box, monkeypatch):
    before = snapshot(box, "boot/grub/grub.cfg")
    assert run_tool(box, monkeypatch, False, "update-grub") == (1, "", "grub-mkconfig: You must run this as root\n")
    assert snapshot(box, "boot/grub/grub.cfg") == before


@pytest.mark.parametrize("rel,value", [
    ("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance"),
    ("sys/devices/system/cpu/cpu0/cpuidle/state3/disable", "1"),
    ("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "8"),
    ("sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages", "1"),
])
def test_sysfs_writes_refused_for_the_node_user(box, rel, value):
    before = snapshot(box, rel)
    res = box.sh(f"printf '%s\\n' {value} | tee sysroot/{rel} >/dev/null", privileged=False)
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{rel}: Permission denied\n")
    assert snapshot(box, rel) == before


# ---- 2. unprivileged reads work as on a real node ----------------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (("lsmod",), "Module                  Size  Used by\n"),
    (("cpupower", "idle-info"), "Available idle states: POLL C1 C1E C6\n"),
    (("cpupower", "-c", "all", "idle-info", "-s"), "analyzing CPU 111:\n"),
    (("nvidia-smi", "topo", "-m"), "  NIC0: mlx5_0\n"),
    (("nvidia-smi", "-L"), "GPU 0: "),
    (("lscpu",), "NUMA node1 CPU(s):"),
    (("numactl", "-H"), "node distances:\n"),
    (("ethtool", "-a", "enp12s0np0"), "Pause parameters for enp12s0np0:\nAutonegotiate:\toff\nRX:\t\ton\nTX:\t\ton\n\n"),
    (("lspci", "-s", "0c:00.0"), "0000:0c:00.0 Ethernet controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n"),
    (("setpci", "-s", "0c:00.0", "VENDOR_ID"), "15b3\n"),
])
def test_unprivileged_reads_work(box, monkeypatch, argv, needle):
    rc, out, err = run_tool(box, monkeypatch, False, *argv)
    assert (rc, err) == (0, "") and needle in out, (rc, out[-400:], err)


def test_unprivileged_lspci_sees_only_the_header(box, monkeypatch):
    rc, out, err = run_tool(box, monkeypatch, False, "lspci", "-vvv", "-s", "0c:00.0")
    assert (rc, err) == (0, "")
    assert "\tCapabilities: <access denied>\n" in out and "MaxReadReq" not in out
    # setpci reads past byte 63 fail (short read): no capability is found, as on a real node
    assert run_tool(box, monkeypatch, False, "setpci", "-s", "0c:00.0", "CAP_EXP+8.w") == (
        1, "", f"setpci: {NIC}: Instance #0 of Capability 0010 not found - there are no capabilities with that id.\n")


def test_unprivileged_read_of_pci_config_is_64_bytes(box):
    """pci-sysfs ``pci_read_config``: without CAP_SYS_ADMIN a read past byte 63 returns nothing."""
    res = box.sh(f"wc -c < sysroot/sys/bus/pci/devices/{NIC}/config", privileged=False)
    assert (res.returncode, res.stdout.strip()) == (0, "64"), (res.stdout, res.stderr)


def test_unprivileged_proc_modules_hides_addresses(box):
    """``modules_open``: a reader without kallsyms_show_value gets ``0x0000000000000000`` (as lsmod's
    caller on a real node with the default kptr_restrict)."""
    res = box.sh("head -n 3 sysroot/proc/modules", privileged=False)
    assert res.returncode == 0
    for line in res.stdout.splitlines():
        assert " Live 0x0000000000000000" in line, line


# ---- 3. the lab refuses what the kernel refuses (and takes what it takes) ---------------------------

GOV = "sys/devices/system/cpu/cpu5/cpufreq/scaling_governor"


@pytest.fixture()
def governor_back(box):
    before = box.path(GOV).read_bytes()
    yield
    box.path(GOV).write_bytes(before)


def _tee(box: Box, rel: str, data: str) -> subprocess.CompletedProcess:
    """Root writes DATA (printf %s, so no newline unless given) to sysroot/REL through the tee stand-in."""
    return box.sh(f"printf %s {shlex.quote(data)} | tee sysroot/{rel} >/dev/null", privileged=True)


def test_governor_not_in_the_list_is_einval(box, governor_back):
    before = box.path(GOV).read_bytes()
    for bad in ("ondemand\n", "userspace\n", "\n"):
        res = _tee(box, GOV, bad)
        assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{GOV}: Invalid argument\n"), bad
    assert box.path(GOV).read_bytes() == before


@pytest.mark.parametrize("written", ["PERFORMANCE\n", "performance", " performance\n"])
def test_governor_store_is_parsed_as_the_kernel_parses_it(box, governor_back, written):
    """intel_pstate (setpolicy): ``sscanf(buf, "%15s")`` then ``strncasecmp``; the file then reads the
    canonical ``performance\\n`` (``show_scaling_governor``)."""
    res = _tee(box, GOV, written)
    assert (res.returncode, res.stderr) == (0, "")
    assert box.path(GOV).read_text() == "performance\n"


def _node0_pool(box: Box, size_kb: int) -> str:
    return f"sys/devices/system/node/node0/hugepages/hugepages-{size_kb}kB/nr_hugepages"


def test_hugepages_beyond_memory_get_what_the_node_holds(box):
    meminfo = box.path("sys/devices/system/node/node0/meminfo").read_text()
    free_kb = int(next(line.split()[3] for line in meminfo.splitlines() if "MemFree:" in line))
    pool = _node0_pool(box, 1048576)
    try:
        res = _tee(box, pool, "100000\n")
        assert (res.returncode, res.stderr) == (0, "")
        assert box.path(pool).read_text() == f"{free_kb // 1048576}\n"
    finally:
        assert _tee(box, pool, "0\n").returncode == 0
    assert box.path(pool).read_text() == "0\n"
    assert box.path("sys/devices/system/node/node0/meminfo").read_text() == meminfo


@pytest.mark.parametrize("value,errno", [("0x10\n", "Invalid argument"), ("-1\n", "Invalid argument"),
                                         (" 8\n", "Invalid argument"),
                                         ("99999999999999999999999\n", "Numerical result out of range"),
                                         ("18446744073709551616\n", "Numerical result out of range")])
def test_hugepages_bad_counts(box, value, errno):
    pool = _node0_pool(box, 2048)
    before = snapshot(box, pool, "proc/meminfo")
    res = _tee(box, pool, value)
    assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{pool}: {errno}\n"), value
    assert snapshot(box, pool, "proc/meminfo") == before


def test_cpuidle_disable_reads_back_0_or_1(box):
    rel = "sys/devices/system/cpu/cpu7/cpuidle/state3/disable"
    try:
        assert _tee(box, rel, "2\n").returncode == 0 and box.path(rel).read_text() == "1\n"
        res = _tee(box, rel, "x\n")
        assert (res.returncode, res.stderr) == (1, f"tee: sysroot/{rel}: Invalid argument\n")
        assert box.path(rel).read_text() == "1\n"
    finally:
        _tee(box, rel, "0\n")
    assert box.path(rel).read_text() == "0\n"


HELP = ".\nTry `setpci --help' for more information.\n"


@pytest.mark.parametrize("op,message", [
    ("ZZZ=1", 'Unknown register "ZZZ"'),
    ("COMMAND=10000", 'Value "10000" is out of range'),
    ("CAP_EXP+3.w=1", "Unaligned register address 03"),
    ("1000.b=1", "Register number 1000 out of range"),
    ("ffe.l=1", "Register number ffe out of range"),
    ("CAP_EXP+8.w=1:zz", 'Invalid mask "zz"'),
])
def test_setpci_bad_operations_as_root(box, monkeypatch, op, message):
    cfg = f"sys/bus/pci/devices/{NIC}/config"
    before = snapshot(box, cfg)
    assert run_tool(box, monkeypatch, True, "setpci", "-s", "0c:00.0", op) == (1, "", f"setpci: {message}{HELP}")
    assert snapshot(box, cfg) == before


def test_setpci_generic_extended_capability_name(box, monkeypatch):
    """pciutils ``parse_register``: ``ECAPxxx`` names extended capability xxx (``ECAP0d`` = ACS)."""
    named = run_tool(box, monkeypatch, True, "setpci", "-s", BRIDGE[5:], "ECAP_ACS+6.w")
    assert named[0] == 0
    assert run_tool(box, monkeypatch, True, "setpci", "-s", BRIDGE[5:], "ECAP0d+6.w") == named


# ---- 4. shell metacharacters in every new inventory key ----------------------------------------------

PAYLOADS = {
    "firmware.mlxconfig": ['firmware:\n  mlxconfig: {"LINK_TYPE_P1;touch PWN": ETH}\n',
                           'firmware:\n  mlxconfig: {LINK_TYPE_P1: "ETH$(touch PWN)"}\n',
                           'firmware:\n  mlxconfig: {LINK_TYPE_P1: "ETH`touch PWN`"}\n',
                           'firmware:\n  mlxconfig: {LINK_TYPE_P1: "ETH\'|touch PWN"}\n'],
    "firmware.version": ['firmware:\n  version: "28.39.2048;touch PWN"\n'],
    "firmware.image_dir": ['firmware:\n  image_dir: "/opt/fw;touch PWN"\n', 'firmware:\n  image_dir: "/opt/$(id)"\n',
                           'firmware:\n  image_dir: "/opt/a b"\n', 'firmware:\n  image_dir: "/opt/../etc"\n'],
    "firmware.allow_reset": ['firmware:\n  allow_reset: "true;touch PWN"\n'],
    "cpu.reserved_cpus": ['cpu:\n  reserved_cpus: "0-1;touch PWN"\n', 'cpu:\n  reserved_cpus: "0-1 $(id)"\n'],
    "cpu.irq_cores_per_numa": ['cpu:\n  irq_cores_per_numa: "2;touch PWN"\n'],
    "cpu.governor": ['cpu:\n  governor: "performance;touch PWN"\n', 'cpu:\n  governor: "$(touch PWN)"\n',
                     'cpu:\n  governor: "performance\\ntouch PWN"\n'],
    "cpu.max_idle_latency_us": ['cpu:\n  max_idle_latency_us: "10`touch PWN`"\n'],
    "cpu.isolate": ['cpu:\n  isolate: "true&&touch PWN"\n'],
    "kernel.cmdline": ['kernel:\n  cmdline: {"iommu;touch PWN": pt}\n', 'kernel:\n  cmdline: {iommu: "pt;touch PWN"}\n',
                       'kernel:\n  cmdline: {iommu: "pt\\" x=\\""}\n', 'kernel:\n  cmdline: {iommu: "pt $(id)"}\n',
                       "kernel:\n  cmdline: {iommu: \"pt'\"}\n", 'kernel:\n  cmdline: {iommu: "pt\\\\"}\n'],
    "kernel.hugepages_2m_per_numa": ['kernel:\n  hugepages_2m_per_numa: "1;touch PWN"\n'],
    "kernel.hugepages_1g_per_numa": ['kernel:\n  hugepages_1g_per_numa: "1|touch PWN"\n'],
    "kernel.numa_balancing": ['kernel:\n  numa_balancing: "false;touch PWN"\n'],
    "modules.nvidia_peermem": ['modules:\n  nvidia_peermem: "true;touch PWN"\n'],
    "pcie.clear_acs": ['pcie:\n  clear_acs: "true;touch PWN"\n'],
    "pcie.max_read_request_bytes": ['pcie:\n  max_read_request_bytes: "4096;touch PWN"\n'],
    "pause.global_pause": ['pause:\n  global_pause: "off;touch PWN"\n'],
}
CASES = [(key, text) for key, texts in PAYLOADS.items() for text in texts]


@pytest.fixture(scope="module")
def bad_inv(scratch) -> Path:
    from tests.conftest import TEST_BASE_PORT
    from tuning.lab.fabric import default_fabric, retarget_inventory

    inv = scratch / "inv"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    retarget_inventory(inv / "hosts.yaml", default_fabric(base_port=TEST_BASE_PORT))  # never another's lab
    return inv


@pytest.mark.parametrize("where", ["group_vars/gpu_nodes.yml", "host_vars/node02.yml"])
@pytest.mark.parametrize("key,text", CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)])
def test_metacharacters_in_new_keys_are_refused_at_load(bad_inv, where, key, text):
    path = bad_inv / where
    original = path.read_text()
    try:
        path.write_text(original + text)
        code, out, err = cli("plan", "-i", str(bad_inv), cwd=bad_inv)
    finally:
        path.write_text(original)
    assert_one_line(code, err, str(path), key)
    assert not list(bad_inv.rglob("PWN")) and not (REPO / "PWN").exists()


# ---- 5. defence in depth: a domain quotes a value the grammar let through (as issue 6 asks) ----------

def _facts():
    from tuning.node.base import NodeFacts

    return NodeFacts(online_cpus="0-111", nics={"enp12s0np0": {"bdf": NIC, "numa_node": "0"}})


def _spec(**sections):
    """node01's spec of inventory/lab with ``sections`` replaced by ``model_construct`` (no validation)."""
    from tuning import inventory
    from tuning.model import NodeSpec

    base = inventory.load(REPO / "inventory" / "lab").devices["node01"].spec
    made = {k: type(getattr(base, k)).model_construct(**{**dict(getattr(base, k)), **v}) for k, v in sections.items()}
    return NodeSpec.model_construct(**{**dict(base), **made})


def _commands(marker: Path) -> list[tuple[str, str]]:
    from tuning.node.cmdline import CmdlineDomain
    from tuning.node.firmware import FirmwareDomain
    from tuning.node.power import PowerDomain

    m = str(marker)
    evil = f'pt";touch {m};"'
    fw_spec = _spec(firmware={"version": "28.42.1000", "image_dir": f"/opt/$(touch {m})"})
    out = [("kernel.cmdline value", CmdlineDomain().command("cmdline/iommu", evil, _spec(kernel={"cmdline": {"iommu": evil}}),
                                                         _facts(), "sysroot")),
           ("kernel.cmdline name", CmdlineDomain().command(f"cmdline/x;touch {m}", "1", _spec(), _facts(), "sysroot")),
           ("firmware.mlxconfig value", FirmwareDomain().command(f"mlxconfig/{NIC}/LINK_TYPE_P1", f"ETH$(touch {m})",
                                                                  _spec(), _facts(), "sysroot")),
           ("firmware.mlxconfig name", FirmwareDomain().command(f"mlxconfig/{NIC}/X;touch {m}", "1", _spec(), _facts(),
                                                                 "sysroot")),
           ("firmware.image_dir", FirmwareDomain().command(f"fw/{NIC}", "28.42.1000", fw_spec, _facts(), "sysroot")),
           ("cpu.governor", PowerDomain().command("governor/all", f"x$(touch {m})", _spec(), _facts(), "sysroot"))]
    return out


def test_domains_quote_values_the_grammar_let_through(box):
    """Specs built with ``model_construct`` (as tests/node/test_shell_injection.py does for issue 6): each
    domain's apply command runs as root in the node sysroot and must not run the payload. The kernel
    command line's value goes into ``GRUB_CMDLINE_LINUX="..."`` of /etc/default/grub, which update-grub
    SOURCES as root: ``q()`` on the awk argument does not protect that file context."""
    marker = box.state / "pwned"
    grub = box.path("etc/default/grub").read_bytes()
    cfg = box.path("boot/grub/grub.cfg").read_bytes()
    ran = []
    try:
        for what, cmd in _commands(marker):
            assert cmd, what
            box.sh(cmd, privileged=True)
            if marker.exists():
                ran.append(what)
                marker.unlink()
    finally:
        box.path("etc/default/grub").write_bytes(grub)
        os.chmod(box.path("boot/grub/grub.cfg"), 0o644)
        box.path("boot/grub/grub.cfg").write_bytes(cfg)
        os.chmod(box.path("boot/grub/grub.cfg"), 0o444)
    assert ran == [], f"payload ran as root through: {ran}"


# ---- 6. new sysfs files, character for character ------------------------------------------------------

@pytest.mark.parametrize("rel,text", [
    # intel_pstate (a setpolicy driver): show_scaling_available_governors writes the fixed pair, no trailing space
    ("sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors", "performance powersave\n"),
    ("sys/devices/system/cpu/cpu0/cpufreq/scaling_driver", "intel_pstate\n"),
    ("sys/devices/system/cpu/cpu0/cpufreq/affected_cpus", "0\n"),
    # drivers/cpuidle/sysfs.c show_available_governors: "%s " per governor, then "\n"
    ("sys/devices/system/cpu/cpuidle/available_governors", "ladder menu teo \n"),
    ("sys/devices/system/cpu/cpu0/cpuidle/state3/name", "C6\n"),
    ("sys/devices/system/cpu/cpu0/cpuidle/state3/default_status", "enabled\n"),
])
def test_new_sysfs_file_formats(box, rel, text):
    res = box.sh(f"cat sysroot/{rel}", privileged=False)
    assert (res.returncode, res.stdout) == (0, text)


def test_node_meminfo_hugepage_lines_layout(box):
    """drivers/base/node.c + mm/hugetlb.c ``hugetlb_report_node_meminfo``: ``Node %d HugePages_Total: %5u``."""
    text = box.path("sys/devices/system/node/node1/meminfo").read_text()
    assert "Node 1 MemTotal:       1056956520 kB\n" in text
    assert text.endswith("Node 1 HugePages_Total:     0\nNode 1 HugePages_Free:      0\nNode 1 HugePages_Surp:      0\n")
