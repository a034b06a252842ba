"""The node domain contract (after tuned's plugins) and the one-round-trip reader.

A domain turns a :class:`~tuning.model.NodeSpec` into flat settings ``key -> value``
(strings), reads the same keys from a node, and knows the command that sets a key.
Plans are pure diffs of two such dicts, so dry-run and apply share one code path
(STYLE.md section 3). Restoring is applying the snapshot's ``before`` values in reverse.

Reading a node is ONE shell script sent in one SSH round trip: each domain contributes
lines of the form ``<key>\\t<value>`` (values base64-encoded where they may hold new lines,
:data:`ABSENT` where a file or tool is missing).
"""

from __future__ import annotations

import base64
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from tuning.model import NodeSpec
from tuning.transport.base import q, sysroot_path

#: value of a key whose file or tool is absent on the node
ABSENT = "\x01absent"

#: when a change takes effect (:attr:`Change.effect`)
EFFECTS = ("live", "reboot_required", "pending_reset", "not_persistent")

#: shell helpers prepended to every read script: ``r KEY FILE`` prints a file's first line
#: (with the ``read`` builtin: no fork per file, which matters for hundreds of IRQ files),
#: ``b KEY CMD...`` prints a command's output base64-encoded, ``rb KEY FILE`` a whole file,
#: ``bp KEY CMD...`` is ``b`` run in the background (vendor tools such as mlnx_qos are slow
#: Python scripts; 8 NICs in parallel instead of in a row).
READ_PRELUDE = r"""
r() { v=; if { IFS= read -r v || [ -n "$v" ]; } 2>/dev/null < "$2"; then printf '%s\t%s\n' "$1" "$v"; else printf '%s\t\001absent\n' "$1"; fi; }
rb() { if [ -f "$2" ]; then printf '%s\t%s\n' "$1" "$(base64 -w0 < "$2")"; else printf '%s\t\001absent\n' "$1"; fi; }
b() { k=$1; shift; if out=$("$@" 2>&1); then printf '%s\t%s\n' "$k" "$(printf '%s' "$out" | base64 -w0)"; else printf '%s\t\001absent\n' "$k"; fi; }
T=$(mktemp -d); n=0
bp() { n=$((n+1)); b "$@" > "$T/$n" & }
"""

#: appended to every read script: collect the outputs of the ``bp`` (parallel ``b``) calls
READ_EPILOGUE = 'wait; cat "$T"/* 2>/dev/null; rm -rf "$T"'



@dataclass
class NodeState:
    """A node as read: discovery facts, each domain's current settings (``domain -> key -> value``)
    and the sysroot the commands address."""

    facts: NodeFacts
    current: dict[str, dict[str, str]] = field(default_factory=dict)
    sysroot: str = "/"

    def flat(self) -> dict[str, str]:
        """Every setting of every domain in one dict (keys are unique across domains)."""
        return {k: v for d in self.current.values() for k, v in d.items()}


@dataclass(frozen=True)
class Change:
    """One setting to change on one device.

    Attributes:
        device: inventory name.  domain: ``mtu``, ``sysctl``, ``nic_qos``, ``irq``, ``files``, ``switch``.
        key: the setting (``mtu/enp12s0np0``).  before / after: values as strings (None = absent).
        reversible: False for changes an automatic rollback cannot undo (firmware).
        apply_cmd: the exact shell command that writes ``after`` (sysroot applied, every
            inventory string quoted); the plan IS what is pushed.
        restore_cmd: the command that writes ``before`` back (``rm -f`` for a file absent
            before); None for a key that cannot be put back (a setting absent before).
        read_cmd: the command whose output holds the key's live value (read back after every
            write; the domain's ``parse_read`` turns the output into the value).
        effect: when the written value takes effect, one of :data:`EFFECTS`: ``live`` (at once),
            ``reboot_required`` (persisted now, active after the next boot: kernel command line),
            ``pending_reset`` (NIC firmware: "Next Boot" set, "Current" differs until a reboot or
            ``mlxfwreset``), ``not_persistent`` (live now, lost at the next boot: ACS cleared with
            ``setpci``). Plans and reports show every effect other than ``live``.
        tags: what the change does to the fabric's path, from :data:`tuning.model.tags.TAGS`, set by the domain or
            switch driver that knows its key (:meth:`Domain.tags`,
            :meth:`tuning.switch.base.SwitchDriver.change_tags`); the safe push order
            (:mod:`tuning.rollout.batches`) reads only these, never a key or a vendor word.
    """

    device: str
    domain: str
    key: str
    before: str | None
    after: str | None
    reversible: bool = True
    apply_cmd: str | None = None
    restore_cmd: str | None = None
    read_cmd: str | None = None
    effect: str = "live"
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tags", tuple(self.tags))  # a journal's or report's list

    def as_dict(self) -> dict:
        """Plain data for JSON reports and the journal (``tags`` as a list). Every field is a str,
        bool, None or the tags tuple, so a shallow copy is the whole of it (``dataclasses.asdict``
        deep-copies each value: a third of an offline plan's CPU at a thousand nodes): the instance's
        own ``__dict__``, which holds exactly the fields (no slots, nothing else set on it)."""
        out = self.__dict__.copy()
        out["tags"] = list(self.tags)
        return out




@dataclass(frozen=True)
class Finding:
    """Something a node reports that a plan does not change (or cannot change) but an operator must see.

    Attributes:
        device: inventory name.  domain: the node domain that read it.
        code: short stable id (``peermem-unregistered``, ``global-pause-rx``, ``acs-redirect``,
            ``pcie-link-degraded``, ``rail-remote-nic``, ``pending-reset``, ``ecn-unsupported``...).
        message: one line for people.  evidence: the values or text read that it rests on.
    """

    device: str
    domain: str
    code: str
    message: str
    evidence: str = ""

    def as_dict(self) -> dict:
        """Plain data for JSON reports."""
        return asdict(self)


@dataclass
class NodeFacts:
    """What a node told us about itself in the read round trip.

    Attributes:
        online_cpus: the CPU list of ``/sys/devices/system/cpu/online`` (``0-111``).
        nics: netdev -> {"bdf", "numa_node", "local_cpulist", "comp_irqs" (list[int]), "driver" (ofed|inbox)}.
        raw: every ``key -> value`` line of the read script.
    """

    online_cpus: str = ""
    nics: dict[str, dict] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)


class Unfit(Exception):
    """A desired value the node cannot take (a CPU it does not have, a sysctl it lacks).

    The engine turns it into an InputError naming the inventory file that set ``key``.
    Args: key: the profile key (``irq_cpus``, ``sysctl.vm.foo``).  problem: what is allowed.
    """

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


class Domain(ABC):
    """One tuning domain. Subclasses are registered in :data:`tuning.node.DOMAINS`."""

    name: ClassVar[str]
    #: False for a domain whose changes an automatic rollback must not undo (NIC firmware and
    #: mlxconfig: a value set is only active after a reset; the plan says so)
    reversible: ClassVar[bool] = True
    #: True when the boot script (:mod:`tuning.node.files`) re-applies this domain's desired values
    #: with its own commands at every boot (live-only settings: MTU, QoS, IRQ affinity, ...)
    boot_script: ClassVar[bool] = False

    def effect(self, key: str, before: str | None, after: str, facts: NodeFacts) -> str:
        """When a change of ``key`` to ``after`` takes effect (one of :data:`EFFECTS`); default ``live``."""
        return "live"

    def tags(self, key: str, before: str | None, after: str | None) -> tuple[str, ...]:
        """The :data:`tuning.model.tags.TAGS` of a change of ``key`` (default: none)."""
        return ()

    def reads(self) -> set[str]:
        """The domains a read must cover for this one to plan: itself (the ``files`` domain also
        every domain whose values its boot files persist)."""
        return {self.name}

    @abstractmethod
    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        """Shell lines that print this domain's ``key\\tvalue`` lines (they may use the facts keys)."""

    @abstractmethod
    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        """This domain's settings as read, from ``facts.raw`` (ABSENT where missing)."""

    @abstractmethod
    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        """The settings ``spec`` asks for. Raises InputError for a value the node cannot take."""

    @abstractmethod
    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        """The shell command that sets ``key`` to ``value`` (``value`` ABSENT: remove it, or None
        where the key cannot be removed)."""

    @abstractmethod
    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        """The shell command whose stdout holds ``key``'s live value (see :meth:`parse_read`)."""

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """What this domain reports without changing it (default: nothing)."""
        return []

    def same(self, have: str, want: str) -> bool:
        """Whether a read value equals a wanted one (whitespace collapsed, as the kernel prints)."""
        return normalise(have) == normalise(want)

    def parse_read(self, key: str, output: str) -> str:
        """The value of ``key`` from its :meth:`read_cmd` output (default: the first line)."""
        return output.splitlines()[0] if output.strip() else ""

    def plan(self, device: str, desired: dict[str, str], current: dict[str, str],
             ctx: tuple[NodeSpec, NodeFacts, str] | None = None) -> list[Change]:
        """Pure diff: one Change per key whose normalised value differs. No I/O.

        With ``ctx`` (spec, facts, sysroot) each Change carries its apply, restore and read
        commands, so the journaled plan alone can push, read back and restore it.
        """
        out = []
        for key, want in desired.items():
            have = current.get(key, ABSENT)
            if not self.same(have, want):
                before = None if have == ABSENT else have
                tags = self.tags(key, before, want)
                if ctx is None:
                    out.append(Change(device, self.name, key, before, want, reversible=self.reversible, tags=tags))
                    continue
                spec, facts, sysroot = ctx
                out.append(Change(device, self.name, key, before, want, reversible=self.reversible, tags=tags,
                                  apply_cmd=self.command(key, want, spec, facts, sysroot),
                                  restore_cmd=self.command(key, ABSENT if before is None else before,
                                                           spec, facts, sysroot),
                                  read_cmd=self.read_cmd(key, spec, facts, sysroot),
                                  effect=self.effect(key, before, want, facts)))
        return out


class FileDomain(Domain):
    """A domain whose every key is one sysfs/procfs file (:meth:`path`): written with
    :func:`write_file_cmd` (a kernel refusal is tee's text and exit 1), read with :func:`cat_cmd`;
    a key cannot be removed."""

    @abstractmethod
    def path(self, key: str) -> str:
        """The device path (``/proc/irq/151/smp_affinity_list``) that holds ``key``."""

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        return None if value == ABSENT else write_file_cmd(sysroot, self.path(key), value)

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return cat_cmd(sysroot, self.path(key))


def normalise(value: str) -> str:
    """Compare values as the kernel does: collapse whitespace (``"4096  87380"`` == ``"4096 87380"``)."""
    return " ".join(str(value).split())


def write_file_cmd(sysroot: str, path: str, value: str) -> str:
    """``printf '%s\\n' VALUE | tee SYSROOT/PATH >/dev/null``: one sysfs / procfs value.

    Written through ``tee`` (coreutils, on every host; the idiom of ``echo 1 | sudo tee
    /sys/class/net/IF/ecn/roce_rp/enable/3`` in NVIDIA's RoCE scripts) rather than a shell
    redirect, so a kernel refusal reaches us as tee's text and exit status 1
    (``tee: /proc/irq/151/smp_affinity_list: Numerical result out of range``), and the lab can
    stand in for the kernel's checks with the same texts.
    """
    return f"printf '%s\\n' {q(value)} | tee {q(sysroot_path(sysroot, path))} >/dev/null"


def cat_cmd(sysroot: str, path: str) -> str:
    """``cat SYSROOT/PATH``: the read command of a file-backed key."""
    return f"cat {q(sysroot_path(sysroot, path))}"


def decode(value: str) -> str:
    """Decode a base64 value written by ``b``/``rb`` (ABSENT passes through)."""
    return value if value == ABSENT else base64.b64decode(value).decode(errors="replace")
