"""Domain ``power`` on a lab node over SSH (issue 7, "Kernel and power"): the cpufreq governor of every
CPU and the idle states whose exit latency is above ``cpu.max_idle_latency_us``, live (sysfs) and
persisted (``cmdline/intel_idle.states_off``, domain ``cmdline``), shown apart in the plan; read back
CPU by CPU, restored byte for byte, and back after ``fabtune lab reboot``; changed by hand with
``cpupower``, the plan shows the live form only; a governor the node does not have is refused
before anything is pushed; enabled deep idle states on some nodes only are fleet drift.

The lab node is a Sapphire Rapids DGX H100 (intel_idle ``spr_cstates``: POLL 0, C1 1, C1E 2,
C6 290 us; intel_pstate: governors ``performance powersave``, ``powersave`` at boot)."""

from __future__ import annotations

import pytest

from tests.node.conftest import Node, node_files, with_spec
from tuning import node
from tuning.errors import InputError
from tuning.lab.boot import reboot
from tuning.lab.power_on import reset
from tuning.node.power import fleet_idle_drift
from tuning.parsers import parse

MINE = ("power", "cmdline", "files")
CPU = {"governor": "performance", "max_idle_latency_us": 10}
CPUS = range(112)


def _mine(changes):
    return [c for c in changes if c.domain in MINE]


def _plan(n: Node, dev=None):
    dev = dev or n.dev
    return node.plan(dev, node.collect(n.host, dev))


def _rows(changes, domains=("power", "cmdline")):
    return [(c.key, c.before, c.after, c.effect) for c in changes if c.domain in domains]


def _idle(root, cpu: int, state: int, name: str = "disable") -> str:
    return (root / f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state{state}/{name}").read_text()


def _profile_held(node_lab) -> None:
    """The lab at power-on, then node01 tuned to ``CPU`` and rebooted: it holds the profile live and
    persisted. Each test sets up its own start: pytest-xdist (``--dist worksteal``) may run the tests of
    this module on different workers, each with its own lab, in any grouping."""
    reset(node_lab / ".state")
    n = Node(node_lab, "node01", {"cpu": CPU})
    try:
        node.apply(n.host, n.dev, _mine(n.plan()))
        reboot(node_lab / ".state", "node01", n.dev.connection)
    finally:
        n.close()


def test_plan_apply_read_back_idempotent_restore_and_reboot(node_lab):
    reset(node_lab / ".state")  # power-on, whatever ran before in this lab
    n = Node(node_lab, "node01", {"cpu": CPU})
    try:
        before = node_files(n.sysroot)
        changes = _mine(n.plan())
        # live (power) and persisted (cmdline) apart; C1E (2 us) and shallower stay enabled
        assert _rows(changes) == [
            ("governor/all", "powersave", "performance", "live"),
            ("idle/state3", "enabled", "disabled", "live"),
            ("cmdline/intel_idle.states_off", None, "8", "reboot_required")]
        gov = next(c for c in changes if c.key == "governor/all")
        assert gov.apply_cmd == ("set -- sysroot/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor; "
                                 "if [ -e \"$1\" ]; then printf '%s\\n' performance | tee \"$@\" >/dev/null; "
                                 "else echo 'fabtune: no CPU has cpufreq/scaling_governor: not written' >&2; fi")
        assert gov.read_cmd == "grep -H . sysroot/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"
        node.apply(n.host, n.dev, changes)  # raises unless every CPU reads back the written value
        assert {(n.sysroot / f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor").read_text()
                for c in CPUS} == {"performance\n"}
        assert {_idle(n.sysroot, c, 3) for c in CPUS} == {"1\n"} and _idle(n.sysroot, 7, 2) == "0\n"
        assert _mine(_plan(n)) == []  # a second apply changes nothing
        node.restore(n.host, "node01", [c.as_dict() for c in changes])
        after = node_files(n.sysroot)
        assert [k for k in before.keys() | after.keys() if before.get(k) != after.get(k)] == []

        node.apply(n.host, n.dev, changes)
        reboot(node_lab / ".state", "node01", n.dev.connection)
    finally:
        n.close()
    n = Node(node_lab, "node01", {"cpu": CPU})
    try:
        assert _mine(_plan(n)) == []  # the boot script put the live values back
        assert "intel_idle.states_off=8" in (n.sysroot / "proc/cmdline").read_text().split()
        # the kernel itself started C6 disabled (states_off), not only the boot script
        assert {_idle(n.sysroot, c, 3, "default_status") for c in CPUS} == {"disabled\n"}
        assert (n.sysroot / "sys/module/intel_idle/parameters/states_off").read_text() == "8\n"
    finally:
        n.close()


def test_changed_by_hand_plan_shows_live_and_persisted_apart(node_lab):
    """node01 holds the profile (applied and rebooted); cpupower changes the live form only, an edit of
    the boot loader config the persisted form only."""
    _profile_held(node_lab)
    n = Node(node_lab, "node01", {"cpu": CPU})
    try:
        res = n.host.run("cpupower -c 4-111 idle-set -e 3")
        assert res.rc == 0 and res.stdout.splitlines()[:2] == ["Idlestate 3 enabled on CPU 4",
                                                               "Idlestate 3 enabled on CPU 5"], res
        changes = _mine(_plan(n))
        assert _rows(changes) == [("idle/state3", "disabled on 0-3, enabled on 4-111", "disabled", "live")]
        node.apply(n.host, n.dev, changes)
        node.restore(n.host, "node01", changes)  # the mixed state comes back CPU by CPU
        assert [_idle(n.sysroot, c, 3) for c in (0, 3, 4, 111)] == ["1\n", "1\n", "0\n", "0\n"]
        node.apply(n.host, n.dev, changes)

        edit = "sed -i 's/ intel_idle.states_off=8//' sysroot/etc/default/grub && update-grub"
        assert n.host.run(edit).rc == 0
        # persisted wrong, live right: only the config changes, and it is live already
        assert _rows(_mine(_plan(n))) == [("cmdline/intel_idle.states_off", None, "8", "live")]
        node.apply(n.host, n.dev, _mine(_plan(n)))
        assert _mine(_plan(n)) == []
    finally:
        n.close()


def test_bad_governor_refused_before_push_and_the_lab_kernel_refuses_it_too(node_lab):
    n = Node(node_lab, "node02")
    try:
        before = node_files(n.sysroot)
        bad = with_spec(n.dev, {"cpu": {"governor": "ondemand"}})
        with pytest.raises(InputError, match=r"cpu\.governor: 'ondemand' is not a governor of this node "
                                             r"\(cpufreq driver intel_pstate\); allowed: performance, powersave"):
            _plan(n, bad)
        assert node_files(n.sysroot) == before
        res = n.host.run("printf 'ondemand\\n' | tee sysroot/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
        assert (res.rc, res.stderr) == (1, "tee: sysroot/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor: "
                                           "Invalid argument\n")
        res = n.host.run("cpupower idle-set -d 3", privileged=False)
        assert (res.rc, res.stderr) == (1, "Subcommand idle-set needs root privileges\n")
        res = n.host.run("printf '1\\n' | tee sysroot/sys/devices/system/cpu/cpu0/cpuidle/state3/disable",
                         privileged=False)
        assert res.rc == 1 and res.stderr.endswith("state3/disable: Permission denied\n")
    finally:
        n.close()


def test_idle_info_stand_in_reads_as_collect_and_fleet_drift(node_lab):
    """cpupower idle-info of a lab node parses (the parser of the real samples) to what collect read;
    node01 (C6 disabled: it holds the profile) differs from node02..node04 (C6 enabled): fleet drift."""
    _profile_held(node_lab)
    states = {}
    for name in ("node01", "node02", "node03", "node04"):
        n = Node(node_lab, name, {"cpu": {"max_idle_latency_us": 10}})
        try:
            states[name] = node.collect(n.host, n.dev, only={"power"})
            if name == "node02":
                info = parse("cpupower-idle-info", n.host.run("cpupower idle-info", privileged=False).stdout)
                assert (info.driver, info.governor) == ("intel_idle", "menu")
                assert [(s.name, s.latency_us, s.disabled) for s in info.cpus[0].states] == [
                    ("POLL", 0, False), ("C1", 1, False), ("C1E", 2, False), ("C6", 290, False)]
                assert states[name].current["power"]["idle/state3"] == "enabled"
                assert [f.subject for f in info.findings] == ["C6"]
        finally:
            n.close()
    c6 = [{"state": "state3", "name": "C6", "latency_us": 290, "cpus": "0-111"}]
    assert fleet_idle_drift(states) == [
        {"node": "node01", "deep_enabled": [], "majority": c6, "majority_nodes": 3, "nodes": 4}]


def test_per_cpu_summary_round_trips_into_the_commands_that_write_it_back():
    """No lab: the value of a key is what its restore command writes, CPU by CPU."""
    from tuning.node.power import PowerDomain, groups, summary

    mixed = {c: ("performance" if c < 4 or c > 100 else "powersave") for c in CPUS}
    text = summary(mixed)
    assert text == "performance on 0-3,101-111, powersave on 4-100"
    assert groups(text) == [("performance", [0, 1, 2, 3, *range(101, 112)]), ("powersave", list(range(4, 101)))]
    assert summary({c: "powersave" for c in CPUS}) == "powersave" and groups("powersave") == [("powersave", None)]
    cmd = PowerDomain().command("idle/state3", "disabled on 0-1, enabled on 2", None, None, "/")
    assert cmd == ("printf '%s\\n' 1 | tee /sys/devices/system/cpu/cpu0/cpuidle/state3/disable "
                   "/sys/devices/system/cpu/cpu1/cpuidle/state3/disable >/dev/null && printf '%s\\n' 0 | tee "
                   "/sys/devices/system/cpu/cpu2/cpuidle/state3/disable >/dev/null")
    with pytest.raises(ValueError):
        groups("performance on 0-3, garbage")
