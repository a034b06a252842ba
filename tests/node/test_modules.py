"""Domain ``modules`` on the lab over SSH: nvidia-peermem loaded now and at boot (modules-load.d), read
back, idempotent, restored to the original bytes, back after ``fabtune lab reboot``; listed by lsmod yet
not registered with the RDMA core is reported as such; the legacy nv_peer_mem counts as loaded."""

from __future__ import annotations

import pytest

from tests.node.conftest import Node, node_files
from tuning import node
from tuning.lab.boot import boot_commands
from tuning.lab.fabric import KERNEL_RELEASE
from tuning.lab.hw_pci import inject
from tuning.lab.tools.modtools import NV_VERSION

pytestmark = pytest.mark.lab

BOOT = "sysroot/etc/modules-load.d/fabtune-nvidia-peermem.conf"
UNLOAD = ("awk '$1==\"nvidia_peermem\"||$1==\"nv_peer_mem\"{print $1}' sysroot/proc/modules | "
          "xargs -r modprobe -r")
WRITE = ("printf %s IyBmYWJ0dW5lOiBsb2FkIG52aWRpYS1wZWVybWVtIChHUFVEaXJlY3QgUkRNQSBwZWVyIG1lbW9yeSkgYXQgYm9vdApudmlk"
         f"aWFfcGVlcm1lbQo= | base64 -d > {BOOT} && chmod 0644 {BOOT}")
MINE = {"modules"}


def _mine(changes):
    return [c for c in changes if c.domain in MINE]


def test_peermem_loaded_persisted_read_back_restored_and_back_after_reboot(node_lab):
    n = Node(node_lab, "node01", {"modules": {"nvidia_peermem": True}})
    try:
        before = node_files(n.sysroot)
        changes = node.plan(n.dev, node.collect(n.host, n.dev, only=MINE))
        assert [(c.key, c.before, c.after, c.apply_cmd, c.restore_cmd, c.read_cmd, c.effect) for c in changes] == [
            ("module/nvidia_peermem", "unloaded", "loaded", "modprobe nvidia_peermem", UNLOAD,
             "cat sysroot/proc/modules", "live"),
            ("module/nvidia_peermem/boot", "absent", "present", WRITE, f"rm -f {BOOT}",
             f"if [ -f {BOOT} ]; then base64 -w0 {BOOT}; fi", "live")]
        node.apply(n.host, n.dev, changes)  # read back inside: raises on any difference
        lsmod = n.host.run("lsmod", privileged=False).stdout.splitlines()
        assert lsmod[:2] == ["Module                  Size  Used by", "nvidia_peermem         16384  0"]
        assert "nvidia              54435840  3 nvidia_peermem,nvidia_uvm,nvidia_modeset" in lsmod
        assert (n.sysroot / "sys/kernel/mm/memory_peers/nv_mem/version").read_text() == f"{NV_VERSION}\n"
        state = node.collect(n.host, n.dev, only=MINE)
        assert node.plan(n.dev, state) == [] and node.findings(n.dev, state) == []  # registered: nothing to say
        node.restore(n.host, "node01", [c.as_dict() for c in changes])
        after = node_files(n.sysroot)
        assert [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)] == []
        node.apply(n.host, n.dev, changes)
        assert boot_commands(n.sysroot)[0] == "modprobe -b nvidia_peermem"  # systemd-modules-load, before sysctl
        n.reboot()
        assert node.plan(n.dev, node.collect(n.host, n.dev, only=MINE)) == []  # loaded again at boot
        assert n.host.run("lsmod").stdout.splitlines()[1].startswith("nvidia_peermem ")
    finally:
        n.close()


def test_peermem_listed_by_lsmod_but_not_registered_is_reported(node_lab):
    inject(node_lab / ".state/nodes/node02/sysroot", "peermem-unregistered")  # driver built before MLNX_OFED
    n = Node(node_lab, "node02", {"modules": {"nvidia_peermem": True}})
    try:
        assert n.host.run("modprobe nvidia_peermem").rc == 0
        assert "nvidia_peermem" in n.host.run("lsmod", privileged=False).stdout
        state = node.collect(n.host, n.dev, only=MINE)
        assert [c.key for c in node.plan(n.dev, state)] == ["module/nvidia_peermem/boot"]  # loaded: no change
        [f] = node.findings(n.dev, state)
        assert (f.code, f.evidence) == ("peermem-unregistered", "/proc/modules: nvidia_peermem listed; "
                                        "/sys/kernel/mm/memory_peers/nv_mem/version: absent")
        assert f.message.startswith("nvidia_peermem is loaded (lsmod lists it) but not registered with the RDMA core")
    finally:
        n.close()


def test_legacy_nv_peer_mem_counts_as_loaded_and_says_so(node_lab):
    n = Node(node_lab, "node03", {"modules": {"nvidia_peermem": True}})
    try:
        assert n.host.run("modprobe nv_peer_mem").rc == 0
        state = node.collect(n.host, n.dev, only=MINE)
        assert state.current["modules"]["module/nvidia_peermem"] == "loaded (nv_peer_mem)"
        assert [c.key for c in node.plan(n.dev, state)] == ["module/nvidia_peermem/boot"]
        assert [f.code for f in node.findings(n.dev, state)] == ["peermem-legacy"]
        off = Node(node_lab, "node03", {"modules": {"nvidia_peermem": False}})
        try:
            [ch] = node.plan(off.dev, node.collect(off.host, off.dev, only=MINE))
            assert (ch.before, ch.after, ch.apply_cmd, ch.restore_cmd) == ("loaded (nv_peer_mem)", "unloaded",
                                                                           UNLOAD, "modprobe nv_peer_mem")
            node.apply(off.host, off.dev, [ch])
            assert "nv_peer_mem" not in n.host.run("lsmod").stdout
            node.restore(off.host, "node03", [ch.as_dict()])
            assert n.host.run("lsmod").stdout.splitlines()[1].startswith("nv_peer_mem ")
        finally:
            off.close()
    finally:
        n.close()


def test_modprobe_refuses_without_root_with_the_real_texts(node_lab):
    n = Node(node_lab, "node04")
    try:
        modules = (n.sysroot / "proc/modules").read_bytes()
        res = n.host.run("modprobe nvidia_peermem", privileged=False)
        assert (res.rc, res.stdout, res.stderr) == (1, "", "modprobe: ERROR: could not insert 'nvidia_peermem': "
                                                           "Operation not permitted\n")
        res = n.host.run("modprobe nvidia_fake")
        assert (res.rc, res.stderr) == (1, "modprobe: FATAL: Module nvidia_fake not found in directory "
                                           f"/lib/modules/{KERNEL_RELEASE}\n")
        assert (n.sysroot / "proc/modules").read_bytes() == modules
    finally:
        n.close()
