"""The node Target: a GPU node reached over SSH, its settings the node domains'
(:mod:`tuning.node`: read, plan, one-round-trip apply with read back, restore from the journal).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from tuning import node as node_mod
from tuning.errors import TuningError
from tuning.node.base import Change, Finding, NodeFacts
from tuning.targets.base import DeviceJournal, connection_facts, journaled_changes, pause_for_test
from tuning.transport.base import Host
from tuning.transport.connection import Connection
from tuning.model.outcomes import DeviceState


class NodeTarget:
    """A node (``role: node``, platform ``linux``): :class:`tuning.targets.base.Target`.

    Args:
        name: inventory name.  connection: how to reach it (an inventory's or a journal's).
        platform: the registry key (``linux``).
        device: the inventory :class:`~tuning.inventory.Device` (None when opened from a journal
            record: then only :meth:`restore` and :meth:`preflight` serve).
    """

    role: ClassVar[str] = "node"
    reports_findings: ClassVar[bool] = True
    verifiable: ClassVar[bool] = True  # the pairs, incast and nccl-tests run on nodes

    def __init__(self, name: str, connection: Connection, platform: str = "linux", device=None):
        self.name, self.connection, self.platform, self.device = name, connection, platform, device
        self.host: Host | None = None
        self.here = False  # node-local (:meth:`local`): this machine is the node, no SSH

    @classmethod
    def local(cls, dev, sysroot: str | None = None) -> "NodeTarget":
        """The node ``dev`` driven from itself (node-local mode, ``fabtune node``): commands run as
        local subprocesses (:class:`tuning.transport.local.LocalHost`) in this process's working
        directory and environment, on ``sysroot`` (None: the inventory's ``fabtune_sysroot``; a
        DaemonSet pod that mounts the host at ``/host`` passes ``/host``), privileged ones through
        sudo as over SSH when the inventory says ``become`` (none when already that user)."""
        conn = dev.connection if sysroot is None else dataclasses.replace(dev.connection, sysroot=sysroot)
        return cls.local_from(cls(dev.name, conn, "linux", device=dev))

    @classmethod
    def local_from(cls, t: "NodeTarget") -> "NodeTarget":
        """``t`` (unopened; from an inventory device or a journal record) driven from itself."""
        t.here = True
        return t

    @property
    def rdma_host(self) -> Host | None:
        """The node's shell (perftest runs there); None until :meth:`open`."""
        return self.host

    def open(self) -> None:
        """Open the SSH session (host keys checked); node-local: the local shell. Raises ConnectError."""
        if self.here:
            from tuning.transport.local import LocalHost

            c = self.connection
            self.host = LocalHost(self.name, c.sysroot, become_user=c.become_user if c.become else None)
            return
        from tuning.transport.ssh import SshHost

        self.host = SshHost(self.name, self.connection)

    def close(self) -> None:
        """Close the SSH session (idempotent)."""
        if self.host is not None:
            self.host.close()

    def reopen(self) -> None:
        """A new SSH session when the connection was cut (a push's restore must not use a dead
        one); a standing session is kept: every command runs on its own channel, so none leaves
        output behind. Raises ConnectError."""
        alive = getattr(self.host, "is_active", None)
        if self.host is not None and alive is not None and alive():
            return
        self.close()
        self.open()

    def collect(self, domains: set[str] | None = None) -> node_mod.NodeState:
        """Every domain's reads (of ``domains``) in one round trip (:func:`tuning.node.collect`)."""
        return node_mod.collect(self.host, self.device, domains)

    def plan(self, state: node_mod.NodeState, domains: set[str] | None = None) -> list[Change]:
        """:func:`tuning.node.plan`, only ``domains`` when given. Raises InputError."""
        return [c for c in node_mod.plan(self.device, state) if domains is None or c.domain in domains]

    def findings(self, state: node_mod.NodeState, domains: set[str] | None = None) -> list[Finding]:
        """:func:`tuning.node.findings`, only ``domains`` when given."""
        return [f for f in node_mod.findings(self.device, state) if domains is None or f.domain in domains]

    @classmethod
    def fleet_findings(cls, states: dict[str, node_mod.NodeState], domains: set[str] | None = None,
                       devices: dict | None = None) -> list[Finding]:
        """Across the run's nodes: C-state idle drift against their peers
        (:func:`tuning.node.power.idle_drift_findings`), with the ``power`` domain."""
        from tuning.node.power import idle_drift_findings

        return idle_drift_findings(states) if domains is None or "power" in domains else []

    @classmethod
    def rendered(cls, dev) -> tuple[str, str]:
        """``("files", text)``: the node's boot-persistence files as one document
        (:func:`tuning.render.render_node`), no device contacted."""
        from tuning.render import render_node

        return "files", render_node(dev)

    @classmethod
    def offline_plan(cls, dev, domains: set[str] | None = None) -> tuple[list[Change], list[Finding]]:
        """The desired settings with ``before`` unknown (None), no device contacted; the domains
        whose settings depend on what the node reports (IRQ numbers, the NIC driver's ECN file
        flavour) are not planned and each gets a ``needs-device`` finding."""
        # nothing is read offline: every file the fit checks look for counts as present
        raw = {f"sysctl/{k}": "?" for k in dev.spec.sysctl} | {f"mtu/{n.netdev}": "?" for n in dev.spec.nics}
        wanted, skipped = node_mod.offline_desired(dev.spec, NodeFacts(raw=raw))
        items = [Change(dev.name, d.name, k, None, v) for d, want in wanted for k, v in want.items()
                 if domains is None or d.name in domains]
        notes = [Finding(dev.name, name, "needs-device", f"{name}: its settings depend on what the node reports; "
                         "not planned offline (run plan without --offline)", "")
                 for name in skipped if domains is None or name in domains]
        return items, notes

    def record(self, state: object = None) -> dict:
        """``role``, ``platform`` and the connection facts (every change carries its own restore command)."""
        return {"role": self.role, "platform": self.platform, "connection": connection_facts(self.connection)}

    def push(self, changes: list[Change], journal: DeviceJournal, confirm_s: int | None = None) -> list[Change]:
        """One script with read back (:func:`tuning.node.apply`); see the contract. A failure
        journals what went through (``err.applied``) and whether a NIC reset ran (``reset``)."""
        before = list(journal.get().get("applied") or [])
        journal.update(state=DeviceState.PUSHING)
        try:
            done = node_mod.apply(self.host, self.device, changes)
        except TuningError as e:
            journal.update(state=DeviceState.FAILED, applied=before + [c.as_dict() for c in getattr(e, "applied", [])],
                           reset=bool(getattr(e, "reset", False)))
            raise
        pause_for_test("apply-node", journal.run_id)
        pause_for_test(f"apply-node-batch-{journal.get().get('batch')}", journal.run_id)
        journal.update(state=DeviceState.APPLIED, applied=before + [c.as_dict() for c in done])
        return done

    def confirm(self, record: dict) -> bool:
        """Nothing to confirm: a node's settings hold once read back."""
        return False

    def preflight(self, record: dict) -> str | None:
        """A privileged no-op (sudo, with the run's become settings and password sources)."""
        res = self.host.run("true", timeout=30, privileged=True)
        return None if res.rc == 0 else f"cannot run privileged commands: {(res.stderr or res.stdout).strip()[:200]}"

    def restore(self, record: dict, irreversible: bool = False) -> list[str]:
        """Write every journaled change's ``before`` back (:func:`tuning.node.restore`), the keys
        kept returned. A push that failed before any NIC reset only staged its firmware values
        ("Next Boot"): those go back too, so the node is not left half-changed."""
        staged_only = record.get("state") == DeviceState.FAILED and not record.get("reset")
        return [c.key for c in node_mod.restore(self.host, self.name, journaled_changes(record),
                                                irreversible or staged_only)]

