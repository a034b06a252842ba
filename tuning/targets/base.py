"""The device contract: the only thing the engine, the Ansible stages, rollback and the offline
plan know about a device (docs/architecture.md "Targets").

A :class:`Target` is one device of one kind (role) and platform, resolved by the registry
(:func:`tuning.targets.target_for` from an inventory device, :func:`tuning.targets.target_from_record`
from a journal record alone). Its life in a run:

``open`` -> ``collect(domains)`` -> ``plan(state, domains)`` -> ``record(state)`` (the journal
snapshot, written before any write) -> ``push(changes, journal, confirm_s)`` (the one
transaction: ``pushing`` journaled before the first write, apply, read back, the result
journaled) -> ``confirm(record)`` after the batch verified, or ``restore(record)`` -> ``close``.

Kept small on purpose, as Nornir's connection plugins and NAPALM's driver base are: a new device
kind is a class with these methods registered under its role and platform
(:func:`tuning.targets.register`), with no edit under ``tuning/rollout``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from tuning.node.base import Change, Finding
from tuning.errors import RollbackError
from tuning.transport.base import Host
from tuning.transport.connection import Connection
from tuning.model.outcomes import DeviceState


class DeviceJournal(Protocol):
    """One device's record in the run's journal, as a target sees it (the journal itself lives
    above the targets: :meth:`tuning.rollout.journal.Journal.of`)."""

    run_id: str

    def get(self) -> dict:
        """The record as journaled so far (a dict of the journal's device keys)."""

    def update(self, **fields: Any) -> None:
        """Merge ``fields`` into the record and write the journal (durable before it returns).

        Raises:
            JournalWriteError: the journal could not be written.
        """


@runtime_checkable
class Target(Protocol):
    """One device a run may change.

    Attributes:
        role: the journal's ``role`` of every device of this kind (``node``, ``switch``).
        name: the inventory name.
        platform: the registry key within the role (``linux``; ``nvue``, ``cumulus_linux``).
        reports_findings: whether :meth:`findings` can say anything (a run reads such a device
            again after changing it, for the report).
        verifiable: whether a rollout's verification exercises what this kind changes (RDMA pairs,
            incast and nccl-tests over nodes and switches; :mod:`tuning.verify.ib_sm` for a subnet
            manager); a rollout refuses a kind it cannot prove. A kind the IB verification proves
            (a subnet manager) says so with ``ib_verified = True`` (absent: False).
        rdma_host: the device's shell for RDMA tests (a node's Host), None for a device that
            runs none (a switch): verification asks for it, never for the role.
    """

    role: ClassVar[str]
    reports_findings: ClassVar[bool]
    verifiable: ClassVar[bool]
    name: str
    platform: str

    @property
    def rdma_host(self) -> Host | None: ...

    def open(self) -> None:
        """Connect (host keys checked). Raises ConnectError."""

    def close(self) -> None:
        """Close the session; idempotent."""

    def reopen(self) -> None:
        """A new session: a command cut short leaves its output in the old one."""

    def collect(self, domains: set[str] | None = None) -> object:
        """Read what the plan needs (one round trip where the device allows). Raises TuningError."""

    def plan(self, state: object, domains: set[str] | None = None) -> list[Change]:
        """Pure: the changes from ``state`` to the inventory's wish, only ``domains`` when given.
        Raises InputError when the inventory asks for what the device cannot take."""

    def findings(self, state: object, domains: set[str] | None = None) -> list[Finding]:
        """What an operator must see that no change fixes ([] for a device that reports none)."""

    @classmethod
    def fleet_findings(cls, states: dict[str, object], domains: set[str] | None = None,
                       devices: dict | None = None) -> list[Finding]:
        """Findings across the run's devices of this kind (``states``: name -> collected state;
        ``devices``: the whole inventory, name -> Device, for rules across kinds; None: this kind's
        rules alone)."""

    @classmethod
    def rendered(cls, dev) -> tuple[str, str]:
        """``(suffix, text)``: the artefact ``fabtune render`` writes for the inventory device
        ``dev`` as ``<name>.<suffix>`` (a switch's OS configuration, a node's boot files), no
        device contacted; the same inventory gives the same bytes."""

    @classmethod
    def offline_plan(cls, dev, domains: set[str] | None = None) -> tuple[list[Change], list[Finding]]:
        """The inventory device ``dev``'s desired settings, ``before`` None, no device contacted,
        and findings for what cannot be planned offline (only ``domains`` when given)."""

    def record(self, state: object) -> dict:
        """The journal snapshot of this device before any write: ``role``, ``platform``,
        ``connection`` facts (no secrets) and what a restore needs (a switch's ``revision_before``)."""

    def push(self, changes: list[Change], journal: DeviceJournal, confirm_s: int | None = None) -> list[Change]:
        """The one transaction: journal ``pushing`` before the first write, apply, read every
        value back, journal ``applied`` (or ``unchanged``) with what was written, appended to what
        earlier pushes of this run journaled. On failure journal ``failed`` with what did go
        through and raise; restoring is the caller's (a whole batch is restored together).

        Returns:
            The changes written (a switch that found nothing to commit: []).
        """

    def confirm(self, record: dict) -> bool:
        """Keep a verified push (a switch's commit-confirm); False when there was nothing to
        confirm. Raises CommitConfirmError when the pushed configuration is no longer applied."""

    def preflight(self, record: dict) -> str | None:
        """Read only, before a rollback writes anything: why this device cannot be restored from
        ``record``, or None. Raises TuningError when the device cannot be read."""

    def restore(self, record: dict, irreversible: bool = False) -> list[str]:
        """Put the device back to the journaled snapshot from ``record`` alone.

        Returns:
            The keys kept (irreversible changes an automatic restore leaves: NIC firmware).
        """


def pause_for_test(stage: str, run_id: str | None = None) -> None:
    """Test hook: ``FABTUNE_TEST_PAUSE_AT=STAGE[:SECONDS]`` makes the run block on entering STAGE
    (``collect``, ``apply-node``, ``apply-switch``, ``apply-switch-committed`` (a switch's commit made,
    neither read back nor journaled), ``verify``, ``confirm``, and per batch N
    ``apply-batch-N``, ``apply-node-batch-N``, ``apply-switch-batch-N``, ``verify-batch-N``,
    ``confirm-batch-N``, ``restore-device`` (each device a restore puts back, before it is
    journaled restored)): for SECONDS, else until killed. Several stages are comma-separated
    (``apply-node-batch-3:3,restore-device:3``: a second signal during the restore of a first).
    It says ``fabtune: test pause at STAGE`` on stderr first. Used only by tests (a controller
    killed, or a fault injected, at a known point); unset, it costs one environment lookup."""
    want = os.environ.get("FABTUNE_TEST_PAUSE_AT", "")
    if not want:
        return
    for item in want.split(","):
        name, _, secs = item.partition(":")
        if name == stage:
            print(f"fabtune: test pause at {stage} (run {run_id})", file=sys.stderr, flush=True)
            time.sleep(float(secs) if secs else 600.0)
            return


def connection_facts(conn: Connection) -> dict:
    """A device's connection facts for the journal: every field of its :class:`Connection` (key
    file and known_hosts made absolute) except secrets in clear. A vault-encrypted become password
    is kept as its ciphertext, so that a rollback decrypts it with ``ANSIBLE_VAULT_PASSWORD_FILE``
    as the run did (docs/ansible.md)."""
    out = {k: v for k, v in dataclasses.asdict(conn).items()
           if k == "become_password_vault" or ("pass" not in k.lower() and "secret" not in k.lower())}
    if out.get("become_password_vault") is None:
        out.pop("become_password_vault", None)
    for k in ("key_file", "known_hosts"):
        if out.get(k):
            out[k] = str(Path(out[k]).resolve())
    return out


def journaled_connection(name: str, record: dict) -> Connection:
    """The :class:`Connection` a journal record names (:func:`connection_facts`).

    Raises:
        RollbackError: the record holds no connection facts (a journal of an older fabtune).
    """
    facts = record.get("connection")
    if not isinstance(facts, dict):
        raise RollbackError("the journal holds no connection facts for this device (journal of an older "
                            "fabtune): restore it by hand", host=name, phase="restore")
    known = {f.name for f in dataclasses.fields(Connection)}
    return Connection(**{k: v for k, v in facts.items() if k in known})


def journaled_changes(record: dict) -> list[Change]:
    """The changes to undo: every planned one for a device caught mid-push (``pushing``: writing a
    value that was never changed is harmless, missing one is not), else the applied ones; for a
    device already restored, only the irreversible ones that restore kept."""
    done = record.get("changes") if record.get("state") == DeviceState.PUSHING else record.get("applied")
    fields = {f.name for f in dataclasses.fields(Change)}
    out = [Change(**{k: v for k, v in c.items() if k in fields}) for c in done or []]
    if record.get("restored"):
        out = [c for c in out if c.key in (record.get("kept") or [])]
    return out
