"""The Target contract (issue 17): one suite every Target implementation must pass, as NAPALM's
driver tests are for its drivers. Run for each implementation, resolved through the registry
(:func:`tuning.targets.target_for`, :func:`tuning.targets.target_from_record`) as the engine and
rollback resolve it, never with a stand-in for our own code:

- ``node-linux``: the NodeTarget on the lab's node01 (real SSH, the lab's sudo and stand-ins);
- ``switch-nvue``: the SwitchTarget on the lab's leaf01 (the NVUE simulator, real revisions);
- ``switch-toyos``: the SwitchTarget on the toy switch OS registered from the test folder
  (:mod:`tests.targets.toyos`).

Each test compares what the Target says and does with what the lab device itself holds (its
sysroot files, the switch simulator's ``fabric.json``, the toy switch's revision files), and the
journal with what is on disk. One lab lease for the module; the lab is put back to power-on
before each test (:func:`tuning.lab.power_on.reset`, 0.3 s).

A new member of the :class:`~tuning.targets.base.Target` Protocol needs a contract test here:
:data:`CONTRACT` names the test of each member, and
:func:`test_every_member_of_the_protocol_has_a_contract_test` fails for a member it does not name.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import running_lab
from tests.node.conftest import node_files
from tests.targets.toyos import PLATFORM as TOY, ToyDevice, ToyDriver
from tuning import inventory
from tuning.errors import TuningError
from tuning.model.tags import TAGS, mtu_tags
from tuning.node.base import Change, Finding
from tuning.rollout.journal import Journal
from tuning.targets import Target, platform_of, platforms, roles, target_class, target_for, target_from_record
from tuning.targets.base import journaled_connection

#: each member of the Target Protocol -> the contract test that exercises it (checked both ways)
CONTRACT = {
    "role": "test_the_registry_serves_a_target_with_the_attributes_the_engine_reads",
    "reports_findings": "test_findings_are_this_devices_and_only_a_reporting_kind_has_any",
    "verifiable": "test_the_registry_serves_a_target_with_the_attributes_the_engine_reads",
    "name": "test_the_registry_serves_a_target_with_the_attributes_the_engine_reads",
    "platform": "test_the_registry_serves_a_target_with_the_attributes_the_engine_reads",
    "rdma_host": "test_the_registry_serves_a_target_with_the_attributes_the_engine_reads",
    "open": "test_open_and_collect_read_what_the_device_holds",
    "close": "test_reopen_gives_a_working_session_and_close_is_idempotent",
    "reopen": "test_reopen_gives_a_working_session_and_close_is_idempotent",
    "collect": "test_open_and_collect_read_what_the_device_holds",
    "plan": "test_plan_is_pure_and_yields_the_inventory_values_with_their_tags",
    "findings": "test_findings_are_this_devices_and_only_a_reporting_kind_has_any",
    "fleet_findings": "test_findings_are_this_devices_and_only_a_reporting_kind_has_any",
    "offline_plan": "test_offline_plan_agrees_with_the_online_plan_and_contacts_nothing",
    "rendered": "test_rendered_is_what_render_writes_and_holds_the_devices_settings",
    "record": "test_record_holds_the_connection_facts_and_no_secret",
    "push": "test_push_journals_first_holds_every_planned_value_and_is_idempotent",
    "confirm": "test_confirm_keeps_a_pushed_commit_and_restore_still_undoes_it",
    "preflight": "test_restore_from_the_journal_record_alone_gives_the_snapshot_back",
    "restore": "test_restore_from_the_journal_record_alone_gives_the_snapshot_back",
}
#: a password the lab's sudo asks for in the record test: it must never reach a journal
SECRET = "contract-Secret-0xC0FFEE"


def protocol_members() -> set[str]:
    """The public members the Target Protocol names (methods, properties and annotated attributes)."""
    return {n for n in [*vars(Target), *Target.__annotations__] if not n.startswith("_")}


def test_every_member_of_the_protocol_has_a_contract_test():
    """Fast (no lab): a member added to the Protocol without a contract test fails here."""
    assert protocol_members() == set(CONTRACT), (
        f"members without a contract test: {sorted(protocol_members() - set(CONTRACT))}; "
        f"CONTRACT names members the Protocol lacks: {sorted(set(CONTRACT) - protocol_members())}")
    tests = {n for n, f in globals().items() if n.startswith("test_") and callable(f)}
    assert set(CONTRACT.values()) <= tests, sorted(set(CONTRACT.values()) - tests)


# ----- the implementations, each with the lab's own view of its device ------------------------

class Kind:
    """One Target implementation on one lab device, and how to read that device without it."""

    id = ""
    name = ""
    #: the tags the power-on device's plan carries (model/tags.py)
    tags: set[str] = set()
    #: the domains the pushing tests push (None: the whole plan)
    push_domains: set[str] | None = None
    #: domains whose values are rendered from the online plan of the others (offline they differ)
    derived_domains: set[str] = set()

    def __init__(self, inv: Path, toys: Path) -> None:
        self.inv, self.state, self.toys = inv, inv / ".state", toys

    def device(self):
        return inventory.load(self.inv).devices[self.name]

    def close(self) -> None:
        """Close what the kind opened to look at the device."""

    def held(self) -> dict:
        """What the device holds, read from the lab (not through any Target or driver)."""
        raise NotImplementedError

    def observed(self, state) -> dict:
        """The same facts as :meth:`held`, as a collected state says them."""
        raise NotImplementedError

    def held_settings(self) -> dict[str, str | None]:
        """Plan keys -> the value the lab device holds, for the keys the lab shows."""
        raise NotImplementedError

    def settings(self, state) -> dict[str, str | None]:
        """Plan keys -> the value in a collected state."""
        raise NotImplementedError

    def snapshot(self) -> object:
        """An image of the device to compare byte for byte (files, configuration text)."""
        raise NotImplementedError

    @contextmanager
    def refusing(self) -> Iterator[str]:
        """The device refuses writes (the lab's fault facility) while inside; yields its failure text."""
        raise NotImplementedError
        yield ""


class NodeKind(Kind):
    id, name, tags = "node-linux", "node01", {"mtu_up", "lossless_on"}
    #: what :meth:`Target.rendered` gives: the file suffix and lines the lab inventory asks for
    rendered = ("files", ["### /etc/sysctl.d/90-fabtune.conf", "net.core.rmem_max = 268435456",
                          "mlnx_qos -i enp12s0np0 --trust dscp >/dev/null"])
    # the pushing tests push the MTU and sysctl settings (15 changes: `ip link`, `sysctl -w`, each
    # shown in the sysroot): the whole plan (203 changes, IRQs and boot files) takes 6 s a push on a
    # busy 2-core runner and is the node tests' own (tests/node); the plan test plans it all
    push_domains, derived_domains = {"mtu", "sysctl"}, {"files"}

    @property
    def sysroot(self) -> Path:
        return self.state / "nodes" / self.name / "sysroot"

    def held(self) -> dict:
        from tuning.lab.sysroot import sysctl_path

        spec = self.device().spec
        out = {f"mtu/{n.netdev}": (self.sysroot / "sys/class/net" / n.netdev / "mtu").read_text().strip() for n in spec.nics}
        return out | {f"sysctl/{k}": sysctl_path(self.sysroot, k).read_text().strip() for k in spec.sysctl}

    def observed(self, state) -> dict:
        return {k: state.flat().get(k) for k in self.held()}

    held_settings = held

    def settings(self, state) -> dict[str, str | None]:
        from tuning.node.base import ABSENT

        return {k: None if v == ABSENT else v for k, v in state.flat().items()}

    def snapshot(self) -> object:
        return node_files(self.sysroot)

    @contextmanager
    def refusing(self) -> Iterator[str]:
        from tuning.lab import privileges

        privileges.require_password(self.state, "not-given")  # sudo -n: "a password is required"
        try:
            yield "sudo: a password is required"
        finally:
            privileges.require_password(self.state, None)


class SwitchKind(Kind):
    """Both switch kinds: the plan keys are the driver's reading of the running configuration."""

    def settings(self, state) -> dict[str, str | None]:
        from tuning.switch import driver_class

        held = driver_class(platform_of(self.device())).config_settings(state.running)
        return held | {f"port/{p}/oper_mtu": str(m) for p, m in state.ports.items()}


class NvueKind(SwitchKind):
    id, name, tags = "switch-nvue", "leaf01", {"lossless_on"}
    rendered = ("nvue", ["nv set interface swp1 link mtu 9216", "nv set qos roce mode lossless"])

    def _fabric(self) -> dict:
        return json.loads((self.state / "switches" / f"{self.name}.fabric.json").read_text())

    def held(self) -> dict:
        f = self._fabric()
        roce = f["roce"]
        return {"ports": {p: v["mtu"] for p, v in f["ports"].items()},
                "roce": (roce["enabled"], roce["mode"], roce["pfc_priority"], tuple(roce["ecn_tcs"]),
                         roce["ecn_min_bytes"], roce["ecn_max_bytes"])}

    def observed(self, state) -> dict:
        r = state.roce
        return {"ports": state.ports,
                "roce": (r.enabled, r.mode, r.pfc_priority, tuple(r.ecn_tcs), r.ecn_min_bytes, r.ecn_max_bytes)}

    def held_settings(self) -> dict[str, str | None]:
        f = self._fabric()
        roce = f["roce"]
        return {**{f"port/{p}/mtu": str(v["mtu"]) for p, v in f["ports"].items()},
                "roce/enabled": "on" if roce["enabled"] else None, "roce/mode": roce["mode"],
                "roce/pfc_priority": None if roce["pfc_priority"] is None else str(roce["pfc_priority"])}

    observer = None

    def snapshot(self) -> object:
        from tuning.targets.switch import open_driver

        if self.observer is None:
            self.observer = open_driver(self.device())  # a session of its own, beside the target's
        drv = self.observer
        return drv.running_config(), drv.current_revision() if drv.has_pending_commit() else None, self._fabric()

    def close(self) -> None:
        if self.observer is not None:
            self.observer.close()

    @contextmanager
    def refusing(self) -> Iterator[str]:
        from tuning.lab.inject import inject

        inject(self.state, self.name, "apply-fails")
        try:
            yield "Failed to prepare to apply"
        finally:
            inject(self.state, self.name, "clear")


class ToyKind(SwitchKind):
    id, name, tags = "switch-toyos", "toy01", {"mtu_up", "lossless_on"}
    rendered = ("toy", ["hostname toy01", "lossless on"])

    @property
    def toy(self) -> ToyDevice:
        return ToyDevice(self.toys / self.name)

    def held(self) -> dict:
        return {"revision": self.toy.applied(), "ports": self.toy.oper_mtu(), "running": self.toy.config()}

    def observed(self, state) -> dict:
        return {"revision": state.revision, "ports": state.ports, "running": state.running}

    def held_settings(self) -> dict[str, str | None]:
        return ToyDriver.config_settings(self.toy.config())

    def snapshot(self) -> object:
        return self.toy.config(), self.toy.pending(), (self.toy.root / "candidate").exists()

    @contextmanager
    def refusing(self) -> Iterator[str]:
        (self.toy.root / "faults").write_text("refuse-commit\n")
        try:
            yield "% Commit refused"
        finally:
            (self.toy.root / "faults").unlink()


KINDS = [NodeKind, NvueKind, ToyKind]


@pytest.fixture(scope="module")
def contract_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One lab lease for the module (a copy of inventory/lab) with toy01 among its switches."""
    with running_lab(tmp_path_factory.mktemp("contract")) as inv:
        hosts = inv / "hosts.yaml"
        hosts.write_text(hosts.read_text().replace("        spines:\n", "        toys:\n          hosts:\n            toy01:\n"
                                                   "              ansible_host: 127.0.0.1\n"
                                                   "              ansible_port: 22999\n        spines:\n"))
        (inv / "host_vars" / "toy01.yml").write_text(f"platform: {TOY}\nports: [swp1-2]\n")
        yield inv


#: the contract tests that change a lab device (the lab is put back to power-on after each)
WRITES = {"test_record_holds_the_connection_facts_and_no_secret",
          "test_push_journals_first_holds_every_planned_value_and_is_idempotent",
          "test_restore_from_the_journal_record_alone_gives_the_snapshot_back",
          "test_confirm_keeps_a_pushed_commit_and_restore_still_undoes_it",
          "test_a_failure_text_from_the_device_is_never_read_as_success"}


@pytest.fixture(params=KINDS, ids=[k.id for k in KINDS])
def kind(request, contract_lab: Path, tmp_path: Path) -> Iterator[Kind]:
    """The implementation under test on a power-on device (the lease starts power-on; a test that
    changes a lab device is followed by a reset, 0.3 s), on a fresh toy switch, with the toy OS
    registered (as a plugin registers it)."""
    from tuning.lab import power_on
    from tuning.model.platforms import SWITCH_DRIVERS
    from tuning.targets import register_switch_os

    register_switch_os(TOY, ToyDriver)
    ToyDriver.DEVICES = tmp_path / "toys"
    ToyDevice.power_on(ToyDriver.DEVICES / "toy01", "toy01")
    k = request.param(contract_lab, ToyDriver.DEVICES)
    try:
        yield k
    finally:
        k.close()
        SWITCH_DRIVERS.pop(TOY, None)
        ToyDriver.DEVICES = None
        if request.node.originalname in WRITES and request.param is not ToyKind:
            power_on.reset(contract_lab / ".state")


@contextmanager
def opened(t: Target) -> Iterator[Target]:
    t.open()
    try:
        yield t
    finally:
        t.close()


def snapshot_journal(tmp_path: Path, kind: Kind, t: Target, state: object, changes: list[Change]) -> Journal:
    """The run's journal as the engine writes it before any write (rollout/session.snapshot)."""
    j = Journal.create(tmp_path / "journal", str(kind.inv), "apply")
    j.update(t.name, **t.record(state), changes=[c.as_dict() for c in changes])
    return j


def on_disk(j: Journal, name: str) -> dict:
    return json.loads(j.path.read_text())["devices"][name]


class WatchedJournal:
    """The device's journal record push writes (``Journal.of``); after each update returns (the
    journal is durable then) it reads the journal file back from disk and the device's snapshot:
    what the disk said, and what the device held, at every step of the push."""

    def __init__(self, j: Journal, name: str, kind: Kind) -> None:
        self.record, self.path, self.name, self.kind = j.of(name), j.path, name, kind
        self.run_id = j.run_id
        self.steps: list[tuple[dict, dict, object]] = []

    def get(self) -> dict:
        return self.record.get()

    def update(self, **fields) -> None:
        self.record.update(**fields)
        disk = json.loads(self.path.read_text())["devices"][self.name]
        self.steps.append((fields, disk, self.kind.snapshot()))


def push_plan(tmp_path: Path, kind: Kind, t: Target, confirm_s: int | None = None):
    """Collect, plan, journal the snapshot and push through a :class:`WatchedJournal`."""
    state = t.collect()
    changes = t.plan(state, kind.push_domains)
    j = snapshot_journal(tmp_path, kind, t, state, changes)
    watched = WatchedJournal(j, kind.name, kind)
    done = t.push(changes, watched, confirm_s)
    return changes, j, watched, done


# ----- the contract ----------------------------------------------------------------------------

@pytest.mark.lab
def test_the_registry_serves_a_target_with_the_attributes_the_engine_reads(kind: Kind):
    dev = kind.device()
    t = target_for(dev)
    assert isinstance(t, Target)
    assert type(t) is target_class(dev.role, platform_of(dev))
    assert (type(t).role, t.role) == (dev.role, dev.role) and t.role in roles()
    assert isinstance(t.platform, str) and t.platform == platform_of(dev) and t.platform in platforms(t.role)
    assert t.name == kind.name and isinstance(type(t).reports_findings, bool)
    assert type(t).verifiable is (t.role in ("node", "switch"))  # what RDMA pairs, incast and NCCL cross
    assert t.rdma_host is None  # not opened yet (a switch never has one)
    with opened(t):
        host = t.rdma_host
        if t.role == "node":
            # the shell RDMA tests run on: this node's own shell, its files under its sysroot
            read = host.run(f"cat {host.sysroot}/proc/sys/net/core/rmem_max", privileged=False)
            assert host.name == kind.name and read.stdout.strip() == kind.held()["sysctl/net.core.rmem_max"]
        else:
            assert host is None


@pytest.mark.lab
def test_open_and_collect_read_what_the_device_holds(kind: Kind):
    before = kind.snapshot()
    with opened(target_for(kind.device())) as t:
        assert kind.observed(t.collect()) == kind.held()
    assert kind.snapshot() == before  # reading staged, committed and wrote nothing


@pytest.mark.lab
def test_reopen_gives_a_working_session_and_close_is_idempotent(kind: Kind):
    t = target_for(kind.device())
    t.open()
    try:
        first = kind.observed(t.collect())
        t.reopen()
        assert kind.observed(t.collect()) == first == kind.held()
    finally:
        t.close()
    t.close()  # idempotent


@pytest.mark.lab
def test_plan_is_pure_and_yields_the_inventory_values_with_their_tags(kind: Kind):
    before = kind.snapshot()
    with opened(target_for(kind.device())) as t:
        state = t.collect()
        changes = t.plan(state)
        assert changes and t.plan(state) == changes  # pure: same state, same plan
        held = kind.settings(state)
        for c in changes:
            assert isinstance(c, Change) and c.device == kind.name
            assert c.before == held.get(c.key) and c.after is not None and c.after != c.before, c
            assert isinstance(c.tags, tuple) and set(c.tags) <= set(TAGS), c
            if c.key.startswith("mtu/") or c.key.endswith(("/mtu", "/oper_mtu")):
                assert c.tags == mtu_tags(c.before, c.after), c
        assert set().union(*(c.tags for c in changes)) == kind.tags
        one = changes[0].domain
        assert t.plan(state, {one}) == [c for c in changes if c.domain == one]
        assert t.plan(state, {"no-such-domain"}) == []
    assert kind.snapshot() == before  # planning wrote nothing


@pytest.mark.lab
def test_findings_are_this_devices_and_only_a_reporting_kind_has_any(kind: Kind):
    with opened(target_for(kind.device())) as t:
        state = t.collect()
        found = t.findings(state)
        fleet = type(t).fleet_findings({t.name: state})
    assert isinstance(found, list) and isinstance(fleet, list)
    assert all(isinstance(f, Finding) and f.device == kind.name and f.code and f.message for f in found + fleet)
    if not type(t).reports_findings:
        assert found == [] and fleet == []
    assert t.findings(state, {"no-such-domain"}) == [] and type(t).fleet_findings({t.name: state}, {"no-such-domain"}) == []


@pytest.mark.lab
def test_offline_plan_agrees_with_the_online_plan_and_contacts_nothing(kind: Kind):
    dev = kind.device()
    cls = target_class(dev.role, platform_of(dev))
    offline, notes = cls.offline_plan(dataclasses.replace(dev, connection=dataclasses.replace(dev.connection, port=1)))
    assert offline and all(isinstance(c, Change) and c.device == kind.name and c.before is None for c in offline)
    assert all(isinstance(f, Finding) and f.device == kind.name for f in notes)
    with opened(target_for(dev)) as t:
        online = t.plan(t.collect())
    after = {c.key: c.after for c in offline}
    both = [c for c in online if c.key in after and c.domain not in kind.derived_domains]
    assert both and [(c.key, c.after) for c in both] == [(c.key, after[c.key]) for c in both]
    assert cls.offline_plan(dev, {"no-such-domain"}) == ([], [])


@pytest.mark.lab
def test_rendered_is_what_render_writes_and_holds_the_devices_settings(kind: Kind, tmp_path: Path):
    from tuning.rollout.offline import render_inventory

    dev = kind.device()
    cls = target_class(dev.role, platform_of(dev))
    suffix, text = cls.rendered(dataclasses.replace(dev, connection=dataclasses.replace(dev.connection, port=1)))
    assert (suffix, [ln for ln in kind.rendered[1] if ln in text.splitlines()]) == kind.rendered, text[:2000]
    assert cls.rendered(dev) == (suffix, text)  # the same inventory gives the same bytes
    written = render_inventory(inventory.load(kind.inv), tmp_path)
    assert (tmp_path / f"{kind.name}.{suffix}") in written
    assert (tmp_path / f"{kind.name}.{suffix}").read_text() == text


@pytest.mark.lab
def test_record_holds_the_connection_facts_and_no_secret(kind: Kind, tmp_path: Path, monkeypatch):
    """With a become password the lab's sudo asks for (given as the engine takes it: the
    environment), the target still reads, and neither its record nor the journal holds it."""
    from tuning.lab import privileges

    privileges.require_password(kind.state, SECRET)
    monkeypatch.setenv("FABTUNE_BECOME_PASSWORD", SECRET)
    dev = kind.device()
    try:
        with opened(target_for(dev)) as t:
            state = t.collect()
            rec = t.record(state)
            j = snapshot_journal(tmp_path, kind, t, state, t.plan(state))
    finally:
        privileges.require_password(kind.state, None)
    assert (rec["role"], rec["platform"]) == (dev.role, platform_of(dev))
    c = rec["connection"]
    assert (c["hostname"], c["port"], c["username"]) == (dev.connection.hostname, dev.connection.port, dev.connection.username)
    for k in ("key_file", "known_hosts"):
        assert c[k] == str(Path(getattr(dev.connection, k)).resolve()) and Path(c[k]).is_absolute() and Path(c[k]).is_file()
    assert journaled_connection(kind.name, json.loads(json.dumps(rec))) == dataclasses.replace(
        dev.connection, key_file=c["key_file"], known_hosts=c["known_hosts"])
    assert not [k for k in c if "pass" in k.lower() or "secret" in k.lower()]
    assert SECRET not in json.dumps(rec) and SECRET not in j.path.read_text()
    if dev.role == "switch":
        assert rec["revision_before"] == state.revision


@pytest.mark.lab
def test_push_journals_first_holds_every_planned_value_and_is_idempotent(kind: Kind, tmp_path: Path):
    before = kind.snapshot()
    with opened(target_for(kind.device())) as t:
        changes, j, watched, done = push_plan(tmp_path, kind, t)
    assert done == changes
    # the first journal update is `pushing`, on disk with everything a restore needs, while the
    # device still holds its snapshot: the journal was written before the first write
    fields, disk, device_then = watched.steps[0]
    assert fields == {"state": "pushing"} and disk["state"] == "pushing" and device_then == before
    # a switch OS that numbers its revisions journals the next id, still before the device changes
    nxt = [(f["revision_next"], then) for f, _, then in watched.steps if "revision_next" in f]
    assert all(then == before and int(n) > int(disk["revision_before"]) for n, then in nxt), (nxt, disk)
    assert disk["changes"] == [c.as_dict() for c in changes] and disk["connection"] and disk["role"] == kind.device().role
    # then `applied` with what was written, and the device changed only after that first update
    final = on_disk(j, kind.name)
    assert final["state"] == "applied" and final["applied"] == [c.as_dict() for c in changes]
    assert kind.snapshot() != before and watched.steps[-1][2] == kind.snapshot()
    # the device holds every planned value: in the lab's own files, and read by a fresh session
    lab = kind.held_settings()
    shown = {c.key: c.after for c in changes if c.key in lab}
    assert shown and {k: lab[k] for k in shown} == shown
    then = kind.snapshot()
    with opened(target_for(kind.device())) as again:
        state = again.collect()
        now = kind.settings(state)
        assert {c.key: now.get(c.key) for c in changes} == {c.key: c.after for c in changes}
        # idempotent: a second plan is empty, and a second push of the run writes nothing and
        # keeps what the first journaled
        assert again.plan(state, kind.push_domains) == []
        assert again.push([], j.of(kind.name)) == []
    assert on_disk(j, kind.name) == final and kind.snapshot() == then


@pytest.mark.lab
def test_restore_from_the_journal_record_alone_gives_the_snapshot_back(kind: Kind, tmp_path: Path):
    """Pushed with a confirm window (a switch's commit pending), then restored by a target made
    from the journal file alone: the device is byte for byte its snapshot again."""
    before = kind.snapshot()
    with opened(target_for(kind.device())) as t:
        _, j, _, _ = push_plan(tmp_path, kind, t, confirm_s=300)
    assert kind.snapshot() != before
    rec = on_disk(j, kind.name)
    back = target_from_record(kind.name, rec)
    assert (type(back), back.platform, back.name) == (type(t), t.platform, t.name)
    with opened(back):
        assert back.preflight(rec) is None
        assert back.restore(rec) == []
    assert kind.snapshot() == before
    with opened(target_for(kind.device())) as t:
        assert [c.key for c in t.plan(t.collect(), kind.push_domains)] == [c["key"] for c in rec["changes"]]


@pytest.mark.lab
def test_confirm_keeps_a_pushed_commit_and_restore_still_undoes_it(kind: Kind, tmp_path: Path):
    before = kind.snapshot()
    with opened(target_for(kind.device())) as t:
        changes, j, _, _ = push_plan(tmp_path, kind, t, confirm_s=300)
    rec = on_disk(j, kind.name)
    pushed = kind.snapshot()
    with opened(target_from_record(kind.name, rec)) as back:
        kept = back.confirm(rec)
    if rec["role"] == "switch":
        # the commit waited for its confirm (the pending revision is the journaled one); confirmed,
        # the pushed configuration stays applied with nothing pending
        assert kept is True and pushed[1] == rec["revision"]
        assert kind.snapshot()[:2] == (pushed[0], None)
    else:
        assert kept is False and kind.snapshot() == pushed  # nothing to confirm on a node
    assert {c.key: kind.held_settings().get(c.key, c.after) for c in changes} == {c.key: c.after for c in changes}
    with opened(target_from_record(kind.name, rec)) as back:
        assert back.preflight(rec) is None and back.restore(rec) == []
    assert kind.snapshot() == before


@pytest.mark.lab
def test_a_failure_text_from_the_device_is_never_read_as_success(kind: Kind, tmp_path: Path):
    before, held = kind.snapshot(), kind.held()
    with opened(target_for(kind.device())) as t:
        state = t.collect()
        changes = t.plan(state, kind.push_domains)
        j = snapshot_journal(tmp_path, kind, t, state, changes)
        with kind.refusing() as text:
            with pytest.raises(TuningError) as err:
                t.push(changes, j.of(kind.name))
        assert text in str(err.value)
        # journaled as failed, no commit of the run named; what it lists as applied (a node whose
        # script printed no failure index lists every planned change: restore is idempotent) is
        # planned, and the device holds what it held: nothing refused is counted as written
        rec = on_disk(j, kind.name)
        assert rec["state"] == "failed" and not rec.get("revision")
        assert {c["key"] for c in rec.get("applied") or []} <= {c.key for c in changes}
        assert kind.held() == held
        assert t.plan(t.collect(), kind.push_domains) == changes
    with opened(target_from_record(kind.name, rec)) as back:
        assert back.preflight(rec) is None and back.restore(rec) == []
    assert kind.snapshot() == before

