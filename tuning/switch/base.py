"""The switch driver contract (after NAPALM ``base/base.py``; shared/STYLE.md section 1).

A driver stages a candidate, shows the on-box diff, commits with an optional
confirm window, and confirms, discards or rolls back. netmiko is the transport
*under* a driver, never the contract. Callers branch on :meth:`capabilities`,
never on vendor names.

Typical use (the engine's switch transaction)::

    with NvueDriver(host, port=..., ...) as dev:
        dev.load_candidate(rendered)          # stages only
        if dev.compare():                     # "" means nothing to change
            rev = dev.commit(confirm_within_s=300)
            ... verify ...
            dev.confirm(rev)                  # proves rev is still applied; or dev.rollback()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType

from tuning.errors import CommandError, ParseError, TuningError


@dataclass(frozen=True)
class Capabilities:
    """What a driver can do (after ansible.netcommon ``device_operations``).

    Attributes:
        commit_confirm: ``commit(confirm_within_s=...)`` rolls back by itself unless confirmed.
        replace: ``load_candidate(..., replace=True)`` replaces the whole configuration.
        onbox_diff: ``compare()`` is computed by the device.
        rollback: ``rollback()`` restores the configuration from before our commit.
    """

    commit_confirm: bool
    replace: bool
    onbox_diff: bool
    rollback: bool


@dataclass(frozen=True)
class RoceState:
    """A switch's effective RoCE QoS as the device reports it.

    Attributes:
        enabled: RoCE configured.  mode: ``lossless``, ``lossy`` or None.
        pfc_priority: switch priority with PFC (None: no PFC).  trust: ``pcp``, ``dscp``, ``pcp,dscp``.
        ecn_tcs: traffic classes with ECN marking.  ecn_min_bytes / ecn_max_bytes: ECN thresholds
            in bytes (read back from KB/MB with 2 decimals: within 0.01 KB/MB of the configured value).
        dscp_to_switch_priority: DSCP (0-63) -> switch priority (0-7), all 64 entries.
    """

    enabled: bool = False
    mode: str | None = None
    pfc_priority: int | None = None
    trust: str | None = None
    ecn_tcs: tuple[int, ...] = ()
    ecn_min_bytes: int | None = None
    ecn_max_bytes: int | None = None
    dscp_to_switch_priority: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SwitchState:
    """What ``get_state()`` returns, e.g. ``SwitchState(revision="4", ports={"swp1": 9216}, roce=RoceState(...))``.

    Attributes:
        revision: the applied revision id.  ports: switch port name -> operational MTU (bytes).
        roce: RoCE QoS.  diff / running / candidate: filled by the engine's collect
        (:func:`tuning.targets.switch.collect`): the device's diff of ``candidate`` (the
        rendered configuration) and the applied configuration as the device prints it;
        ``running`` also by ``get_state`` where the OS's state read includes it (EOS, SONiC).
    """

    revision: str
    ports: dict[str, int]
    roce: RoceState
    diff: str | None = None
    running: str | None = None
    candidate: str | None = None


class SwitchDriver(ABC):
    """One switch session. Use as a context manager (``open`` on enter, ``close`` on exit).

    Rules: ``load_candidate`` changes nothing live; a second ``commit`` while a confirm is
    pending raises ``CommitError``; every library error leaves as a ``tuning.errors`` error
    (``ConnectError``, ``CommandError``, ``CandidateError``, ``CommitError``,
    ``CommitConfirmError``, ``RollbackError``) raised ``from`` the cause; an unsupported
    operation raises ``NotSupportedError``.

    Attributes:
        allow_overwrite_files: a commit may overwrite files the OS manages that were edited by hand
            since its last save (NVUE warns before it does, :mod:`tuning.switch.nvue_text`); False
            (default): such a commit is refused, nothing applied (``fabtune apply|rollout
            --allow-overwrite-files`` sets it). An OS that gives no such warning ignores it.
    """

    allow_overwrite_files: bool = False

    def __enter__(self) -> "SwitchDriver":
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @abstractmethod
    def open(self) -> None:
        """Connect. Raises ConnectError (unreachable, refused key, unknown host key)."""

    @abstractmethod
    def close(self) -> None:
        """Disconnect; a staged (uncommitted) candidate is left as is. Never raises."""

    @abstractmethod
    def capabilities(self) -> Capabilities:
        """The operations this driver supports."""

    @abstractmethod
    def get_state(self) -> SwitchState:
        """Read the applied state (port MTUs, RoCE QoS, revision)."""

    @abstractmethod
    def load_candidate(self, config: str, *, replace: bool = False) -> None:
        """Stage ``config`` (the rendered template). Raises CandidateError naming the bad line."""

    @abstractmethod
    def compare(self) -> str:
        """The device's diff of applied versus candidate; ``""`` means no change."""

    @abstractmethod
    def commit(self, *, confirm_within_s: int | None = None, message: str = "") -> str:
        """Apply the candidate; with ``confirm_within_s`` the device rolls back unless confirmed.

        Returns:
            The new revision id, e.g. ``"5"`` (the current one when nothing was staged).
        """

    @abstractmethod
    def confirm(self, revision: str | None = None) -> None:
        """Keep ``revision`` (default: this session's commit, else the pending commit-confirm) and
        prove it: afterwards it is the applied revision and waits for no confirm.

        Raises:
            CommitConfirmError: nothing to confirm, the device's failure text, or the revision is
                no longer applied (the confirm window ran out), naming both revisions.
        """

    @abstractmethod
    def has_pending_commit(self) -> bool:
        """True while a commit-confirm waits for :meth:`confirm`."""

    def pending_commit(self) -> tuple[str, str | None] | None:
        """The commit-confirm waiting for :meth:`confirm`, as ``(revision, parent)``: its id and
        the id of the revision it was applied on top of (None where the device does not say),
        e.g. ``("7", "6")``; None when no confirm is pending."""
        return (self.current_revision(), self.applied_parent()) if self.has_pending_commit() else None

    def applied_parent(self) -> str | None:
        """Id of the revision the applied one was applied on top of (``"6"`` when ``"7"`` was
        committed on ``"6"``), pending or not; None where the device does not say (this default).
        Rollback uses it to recognise a commit a killed run made and never journaled."""
        return None

    def next_revision(self) -> str | None:
        """Id the commit of the staged candidate will get (NVUE ``"8"`` when the newest revision is
        ``"7"``; EOS the digest of the staged configuration), read once the candidate is staged and
        journaled before the commit, so that a commit the run made and never journaled (its
        controller killed, its session cut inside the commit) is recognised as the run's even on a
        device that does not say a revision's parent. None where the driver cannot know it (this
        default)."""
        return None

    @abstractmethod
    def discard(self) -> None:
        """Drop the staged candidate."""

    @abstractmethod
    def rollback(self) -> None:
        """Go back to the revision applied before our commit. Raises RollbackError."""

    @abstractmethod
    def rollback_to(self, revision: str) -> None:
        """Apply an earlier revision again (a journaled snapshot, e.g. ``"3"``). Raises RollbackError."""

    @abstractmethod
    def current_revision(self) -> str:
        """Id of the applied revision, e.g. ``"4"``."""

    @abstractmethod
    def running_config(self) -> str:
        """The applied configuration as the device prints it (NVUE: ``nv set`` lines)."""

    # The diff reader: the OS's own configuration text as flat settings. Class-level, so an offline
    # plan (no session) reads a rendered candidate the same way a live run reads the device.

    @staticmethod
    @abstractmethod
    def config_settings(text: str) -> dict[str, str]:
        """Flat settings of a configuration text (a rendered candidate or :meth:`running_config`),
        in text order: ``{"port/swp1/mtu": "9216", "roce/pfc_tx": "on", ...}`` (the keys of
        :class:`tuning.node.base.Change` for ``domain="switch"``). Raises CandidateError on a
        line the OS's grammar does not know."""

    @staticmethod
    @abstractmethod
    def diff_changes(diff: str, running: str) -> dict[str, tuple[str | None, str | None]]:
        """Flat settings a device diff (:meth:`compare`) changes: ``key -> (before, after)``,
        ``before`` read from ``running`` (None: not configured), ``after`` None when the diff
        removes the setting."""

    @staticmethod
    def change_tags(key: str, before: str | None, after: str | None) -> tuple[str, ...]:
        """The :data:`tuning.model.tags.TAGS` of a change of ``key`` (an MTU raised, lossless
        turned on, ...): the OS's key names and words stay with its driver. Default: none."""
        return ()

    #: the Jinja2 template of the OS's configuration under ``tuning/templates/`` (its ``switch``
    #: context: :func:`tuning.render.switch_context`), and the file suffix ``fabtune render`` writes
    template: str = ""
    config_suffix: str = "conf"

    @classmethod
    def render_config(cls, switch: dict) -> str:
        """The configuration text of one switch from its ``switch`` context (:attr:`template`,
        StrictUndefined). Raises jinja2.UndefinedError on a context key the template lacks."""
        from tuning.templating import render_template

        return render_template(cls.template, switch=switch)


@contextmanager
def as_step_error(error: type[TuningError], name: str, phase: str) -> Iterator[None]:
    """Reading the device inside a transaction step fails as that step: a CommandError or
    ParseError raised inside becomes ``error`` (e.g. CommitError) naming the device's text."""
    try:
        yield
    except (CommandError, ParseError) as exc:
        raise error(f"reading the device failed: {exc}", host=name, phase=phase) from exc
