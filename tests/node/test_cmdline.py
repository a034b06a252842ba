"""Domain ``cmdline`` on a lab node over SSH (issue 7: kernel command-line options through the boot
loader config, ``reboot_required`` reported, never a reboot): the Ubuntu lab node's
``/etc/default/grub`` + ``update-grub``; the plan shows the persisted value, the effect and the
findings say what the running kernel (``/proc/cmdline``) has; restore gives ``/etc/default/grub``
and the regenerated ``grub.cfg`` back byte for byte; after ``fabtune lab reboot`` ``/proc/cmdline``
holds the options. ``cpu.isolate`` puts part B's GPU worker CPUs on it."""

from __future__ import annotations

import pytest

from tests.node.conftest import Node, node_files, with_spec
from tuning import node
from tuning.errors import CommandError, InputError
from tuning.lab.boot import reboot
from tuning.lab.power_on import reset
from tuning.node.cmdline import CmdlineDomain

OPTS = {"iommu": "pt", "nosoftlockup": ""}
LINUX = 'GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200n8'
BOOT = ("etc/default/grub", "boot/grub/grub.cfg")


def _plan(n: Node, dev=None):
    dev = dev or n.dev
    state = node.collect(n.host, dev)
    return [c for c in node.plan(dev, state) if c.domain == "cmdline"], state


def _findings(n: Node, state, dev=None):
    dev = dev or n.dev
    return [(f.code, f.message.split(" is ")[0]) for f in
            CmdlineDomain().findings(n.name, dev.spec, state.facts, state.current["cmdline"])]


def _grub(root) -> str:
    return next(l for l in (root / "etc/default/grub").read_text().splitlines() if l.startswith("GRUB_CMDLINE_LINUX="))


def test_plan_apply_read_back_restore_and_reboot(node_lab):
    reset(node_lab / ".state")  # power-on: another test of the module boots node01 with OPTS
    n = Node(node_lab, "node01", {"kernel": {"cmdline": OPTS}})
    try:
        before = {p: (n.sysroot / p).read_bytes() for p in BOOT}
        proc = (n.sysroot / "proc/cmdline").read_text()
        changes, _ = _plan(n)
        assert [(c.key, c.before, c.after, c.effect) for c in changes] == [
            ("cmdline/iommu", None, "pt", "reboot_required"), ("cmdline/nosoftlockup", None, "", "reboot_required")]
        node.apply(n.host, n.dev, changes)  # reads the config back as update-grub sources it
        assert _grub(n.sysroot) == LINUX + ' iommu=pt nosoftlockup"'
        assert "ro console=tty0 console=ttyS0,115200n8 iommu=pt nosoftlockup \n" in \
            (n.sysroot / "boot/grub/grub.cfg").read_text()
        assert (n.sysroot / "proc/cmdline").read_text() == proc  # never a reboot
        again, state = _plan(n)
        assert again == []
        assert _findings(n, state) == [("reboot-required", "iommu=pt"), ("reboot-required", "nosoftlockup")]
        node.restore(n.host, "node01", [c.as_dict() for c in changes])
        assert {p: (n.sysroot / p).read_bytes() for p in BOOT} == before

        node.apply(n.host, n.dev, changes)
        reboot(node_lab / ".state", "node01", n.dev.connection)
    finally:
        n.close()
    n = Node(node_lab, "node01", {"kernel": {"cmdline": OPTS}})
    try:
        assert (n.sysroot / "proc/cmdline").read_text().split()[-2:] == ["iommu=pt", "nosoftlockup"]
        again, state = _plan(n)
        assert again == [] and _findings(n, state) == []
    finally:
        n.close()


def _booted_with_opts(node_lab) -> None:
    """node01 from power-on, its command line holding OPTS in the config and in the running kernel."""
    reset(node_lab / ".state")
    n = Node(node_lab, "node01", {"kernel": {"cmdline": OPTS}})
    try:
        node.apply(n.host, n.dev, _plan(n)[0])
        reboot(node_lab / ".state", "node01", n.dev.connection)
    finally:
        n.close()


def test_config_wrong_live_right_is_live_and_a_value_is_replaced_in_place(node_lab):
    """On a node01 booted with OPTS: the option edited out of the config by hand plans as ``live`` (the
    running kernel has it); a new value replaces the old one where it stands, restore puts it back."""
    _booted_with_opts(node_lab)
    n = Node(node_lab, "node01", {"kernel": {"cmdline": OPTS}})
    try:
        assert n.host.run("sed -i 's/ iommu=pt//' sysroot/etc/default/grub && update-grub").rc == 0
        changes, _ = _plan(n)
        assert [(c.key, c.before, c.after, c.effect) for c in changes] == [("cmdline/iommu", None, "pt", "live")]
        node.apply(n.host, n.dev, changes)
        assert _grub(n.sysroot) == LINUX + ' nosoftlockup iommu=pt"'
        before = {p: (n.sysroot / p).read_bytes() for p in BOOT}
        off = with_spec(n.dev, {"kernel": {"cmdline": {**OPTS, "iommu": "off"}}})
        changes, _ = _plan(n, off)
        assert [(c.key, c.before, c.after, c.effect) for c in changes] == [
            ("cmdline/iommu", "pt", "off", "reboot_required")]
        node.apply(n.host, off, changes)
        assert _grub(n.sysroot) == LINUX + ' nosoftlockup iommu=off"'
        node.restore(n.host, "node01", changes)
        assert {p: (n.sysroot / p).read_bytes() for p in BOOT} == before
    finally:
        n.close()


def test_update_grub_failure_puts_the_config_back_and_needs_root(node_lab):
    n = Node(node_lab, "node02", {"kernel": {"cmdline": {"iommu": "pt"}}})
    try:
        res = n.host.run("update-grub", privileged=False)
        assert (res.rc, res.stderr) == (1, "grub-mkconfig: You must run this as root\n")
        before = node_files(n.sysroot)
        changes, _ = _plan(n)
        broken = "sysroot/etc/default/grub.d/99-broken.cfg"
        assert n.host.run(f"printf 'if then\\n' > {broken}").rc == 0  # someone breaks it after the plan
        with pytest.raises(CommandError, match="(?i)syntax error"):
            node.apply(n.host, n.dev, changes)
        assert n.host.run(f"rm {broken}").rc == 0
        assert node_files(n.sysroot) == before  # /etc/default/grub put back, grub.cfg untouched
    finally:
        n.close()


def test_unsupported_boot_loader_and_computed_options_refused_before_push(node_lab):
    n = Node(node_lab, "node03", {"kernel": {"cmdline": {"iommu": "pt"}}})
    try:
        clash = with_spec(n.dev, {"kernel": {"cmdline": {"intel_idle.states_off": "8"}},
                                  "cpu": {"max_idle_latency_us": 10}})
        with pytest.raises(InputError, match=r"kernel\.cmdline\.intel_idle\.states_off: cpu\.max_idle_latency_us "
                                             r"computes intel_idle\.states_off"):
            _plan(n, clash)
        assert n.host.run("mv sysroot/etc/default/grub sysroot/etc/default/grub.away").rc == 0
        try:
            with pytest.raises(InputError, match=r"kernel\.cmdline: this node boots with no boot loader fabtune "
                                                 r"knows; .* allowed: leave kernel\.cmdline unset"):
                _plan(n)
        finally:
            assert n.host.run("mv sysroot/etc/default/grub.away sysroot/etc/default/grub").rc == 0
    finally:
        n.close()


def test_isolate_puts_the_gpu_workers_cpus_on_the_command_line(node_lab):
    """``cpu.isolate``: ``isolcpus`` and ``nohz_full`` are the CPU plan's GPU worker CPUs (part B's
    ``tuning.node.cpuplan.isolated_cpus``), never the NIC IRQ cores, reboot_required."""
    from tuning.cpulist import parse_cpulist
    from tuning.node.cpuplan import isolated_cpus

    n = Node(node_lab, "node04", {"cpu": {"isolate": True, "irq_cores_per_numa": 2}})
    try:
        changes, state = _plan(n)
        cpus = isolated_cpus(n.dev.spec, state.facts)
        assert [(c.key, c.before, c.after, c.effect) for c in changes] == [
            ("cmdline/isolcpus", None, cpus, "reboot_required"), ("cmdline/nohz_full", None, cpus, "reboot_required")]
        assert 0 < len(parse_cpulist(cpus)) < 112 and 0 not in parse_cpulist(cpus)
        irq_cpus = {int(c.after) for c in node.plan(n.dev, state) if c.domain == "irq"}
        assert irq_cpus and not irq_cpus & set(parse_cpulist(cpus))
        node.apply(n.host, n.dev, changes)
        assert f"isolcpus={cpus} nohz_full={cpus}" in _grub(n.sysroot)
        node.restore(n.host, "node04", changes)
        clash = with_spec(n.dev, {"kernel": {"cmdline": {"isolcpus": "2-5"}}})
        with pytest.raises(InputError, match=r"kernel\.cmdline\.isolcpus: cpu\.isolate computes isolcpus"):
            _plan(n, clash)
    finally:
        n.close()


@pytest.mark.parametrize("text, opt, word, want", [
    # appended to GRUB_CMDLINE_LINUX, other lines untouched (byte for byte)
    ('A=1\nGRUB_CMDLINE_LINUX_DEFAULT="quiet  splash"\nGRUB_CMDLINE_LINUX=""\n', "iommu", "iommu=pt",
     'A=1\nGRUB_CMDLINE_LINUX_DEFAULT="quiet  splash"\nGRUB_CMDLINE_LINUX="iommu=pt"\n'),
    # replaced where it stands, dash and underscore the same name; dropped from _DEFAULT
    ("GRUB_CMDLINE_LINUX='a nohz-full=1 b'\nGRUB_CMDLINE_LINUX_DEFAULT=\"nohz_full=3 quiet\"\n", "nohz_full",
     "nohz_full=2-5", "GRUB_CMDLINE_LINUX='a nohz_full=2-5 b'\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n"),
    # removed (restore of an option absent before); a line without it stays as it was
    ('GRUB_CMDLINE_LINUX="x iommu=pt"\nGRUB_CMDLINE_LINUX_DEFAULT="a  b"\n', "iommu", "",
     'GRUB_CMDLINE_LINUX="x"\nGRUB_CMDLINE_LINUX_DEFAULT="a  b"\n'),
    # no GRUB_CMDLINE_LINUX line at all: one is added at the end
    ("GRUB_DEFAULT=0\n", "iommu", "iommu=pt", 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX="iommu=pt"\n'),
])
def test_awk_edit_of_etc_default_grub(tmp_path, text, opt, word, want):
    """No lab: the very awk program of the apply command, run by the system's awk."""
    import subprocess

    from tuning.node.cmdline import _AWK

    f = tmp_path / "grub"
    f.write_text(text)
    res = subprocess.run(["awk", "-v", f"opt={opt}", "-v", f"word={word}", _AWK, str(f)], capture_output=True,
                         text=True, check=True)
    assert res.stdout == want


def test_options_read_as_the_kernel_reads_them():
    from tuning.node.cmdline import grub_words, options

    assert options('BOOT_IMAGE=/vmlinuz ro a-b=1 x="y z" flag iommu=off iommu=pt -- init=1') == {
        "BOOT_IMAGE": "/vmlinuz", "ro": "", "a_b": "1", "x": "y z", "flag": "", "iommu": "pt"}
    assert grub_words("noise\n@@grub\nconsole=tty0 iommu=pt\nquiet\n") == "console=tty0 iommu=pt quiet"
    assert grub_words("sh: 1: Syntax error") is None
