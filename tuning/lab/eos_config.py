"""The Arista EOS stand-in's command grammar, configuration model and running-config layout.

Grammar: every command is a :class:`Cmd` (the modes it is valid in, a pattern such as
``"priority-flow-control priority <0-7> no-drop"`` and what it does), matched token by token as
the EOS parser does: a keyword may be abbreviated while it stays unique (``p`` in interface mode
is ``% Ambiguous command``), a value out of range is ``% Invalid input (at token N: 'x')`` with
N 0-based, a line that stops early is ``% Incomplete command`` (shared/cases/cli/
eos__errors_invalid_incomplete_ambiguous.txt; aristanetworks/avd#7025, ansible/ansible#67077).

Configuration: a dict ``{"globals": {slot: line}, "qos_map": {dscp: tc}, "interfaces":
{name: {"lines": {slot: line}, "txq": {queue: {slot: line}}}}}``. A slot is where one
configuration line lives (``mtu``, ``pfc priority 3``); setting it again replaces the line, its
``no`` form removes it. :func:`render` prints it in EOS's own order whatever order it was typed
in (eos__running_config_roce_lines.txt; aristanetworks/avd eos_cli_config_gen templates
ethernet-interfaces.j2 / ethernet-interface-tx-queues.j2 / qos.j2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
#: modes of the configuration grammar (``exec`` commands live in :mod:`tuning.lab.eos`)
CONFIG, IF, TXQ = "config", "if", "txq"
#: a mode's parent (the mode ``exit`` goes to, and where a command it lacks falls through to)
PARENT = {TXQ: IF, IF: CONFIG, CONFIG: None}

INVALID = "% Invalid input (at token {i}: '{tok}')"
INCOMPLETE = "% Incomplete command"
AMBIGUOUS = "% Ambiguous command"

_IPV4 = r"(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)"
#: value kinds of ``<...>`` pattern tokens that are not integer ranges
_VALUES = {
    "prefix": _IPV4 + r"/(?:3[0-2]|[12]?\d)", "ip": _IPV4, "name": r"[A-Za-z0-9][A-Za-z0-9._-]*",
    "decimal": r"\d+(?:\.\d+)?", "hh:mm:ss": r"\d{1,2}:[0-5]\d:[0-5]\d", "file": r"flash:[A-Za-z0-9._/-]+",
    "ifname": r"(?i)(?:e(?:t(?:h(?:e(?:r(?:n(?:e(?:t)?)?)?)?)?)?)?|m(?:a(?:n(?:a(?:g(?:e(?:m(?:e(?:n(?:t)?)?)?)?)?)?)?)?)?)\d+",
}


@dataclass(frozen=True)
class Spec:
    """One pattern token: a keyword (``words``), an integer range, a value regex, or the rest of the line."""

    kind: str  # kw | int | ints (one or more integers) | re | rest
    words: tuple[str, ...] = ()
    lo: int = 0
    hi: int = 0
    regex: str = ""


def compile_pattern(pattern: str) -> tuple[Spec, ...]:
    """``"qos map dscp <0-63>+ to traffic-class <0-7>"`` -> its :class:`Spec` tuple.

    ``{a|b}`` is a choice of keywords, ``<lo-hi>`` an integer range (``+``: one or more),
    ``<text>`` the rest of the line, ``<prefix>``/``<ip>``/``<name>``/... a value (:data:`_VALUES`).
    """
    specs = []
    for tok in pattern.split():
        rng = re.fullmatch(r"<(\d+)-(\d+)>(\+?)", tok)
        if rng:
            specs.append(Spec("ints" if rng.group(3) else "int", lo=int(rng.group(1)), hi=int(rng.group(2))))
        elif tok == "<text>":
            specs.append(Spec("rest"))
        elif tok.startswith("<"):
            specs.append(Spec("re", regex=_VALUES[tok[1:-1]]))
        elif tok.startswith("{"):
            specs.append(Spec("kw", words=tuple(tok[1:-1].split("|"))))
        else:
            specs.append(Spec("kw", words=(tok,)))
    return tuple(specs)


@dataclass(frozen=True)
class Cmd:
    """One command of the grammar.

    Attributes:
        modes: where it is valid.  pattern: see :func:`compile_pattern`.
        slot / line: a configuration line: ``slot`` (formatted with the values) is where it
            lives, ``line`` its canonical text (None: the ``no`` form, which removes it).
        action: the name of a handler instead (exec commands, modes, maps).
        privileged: refused in ``>`` mode (exec commands only).
    """

    modes: tuple[str, ...]
    pattern: str
    slot: str = ""
    line: str | None = None
    action: str = ""
    privileged: bool = True
    specs: tuple[Spec, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "specs", compile_pattern(self.pattern))


@dataclass
class Match:
    """A parsed line: the command and its values (words as typed for keywords are not kept)."""

    cmd: Cmd
    values: list = field(default_factory=list)


class ParseError(Exception):
    """A line the grammar refuses; ``str()`` is EOS's text, ``token`` where it failed (-1: not a token)."""

    def __init__(self, text: str, token: int = -1) -> None:
        super().__init__(text)
        self.token = token


def canonical_ifname(text: str) -> str:
    """``et1`` / ``Ethernet1`` -> ``Ethernet1``; ``ma1`` -> ``Management1``."""
    num = re.search(r"\d+$", text).group(0)
    return ("Ethernet" if text[0] in "eE" else "Management") + num


def _value(spec: Spec, tok: str) -> object | None:
    """The value ``tok`` gives for a value spec, or None when it does not fit."""
    if spec.kind in ("int", "ints"):
        return int(tok) if tok.isdigit() and spec.lo <= int(tok) <= spec.hi else None
    return tok if re.fullmatch(spec.regex, tok) else None


def _step(state: tuple, tok: str, rest: str) -> list[tuple]:
    """Where one parse ``state`` ``(cmd, k, values, in_list)`` goes on token ``tok``:
    ``[(state', keyword_or_None)]``."""
    cmd, k, vals, in_list = state
    if k >= len(cmd.specs):
        return []
    spec = cmd.specs[k]
    out: list[tuple] = []
    if spec.kind == "ints" and in_list:
        value = _value(spec, tok)
        if value is not None:
            return [((cmd, k, vals[:-1] + [vals[-1] + [value]], True), None)]
        return _step((cmd, k + 1, vals, False), tok, rest)
    if spec.kind == "kw":
        out = [((cmd, k + 1, vals + [w], False), w) for w in spec.words if w.startswith(tok.lower())]
    elif spec.kind == "rest":
        out = [((cmd, len(cmd.specs), vals + [rest], False), None)]
    else:
        value = _value(spec, tok)
        if value is not None:
            out = [((cmd, k + 1 if spec.kind != "ints" else k, vals + [[value] if spec.kind == "ints" else value],
                     spec.kind == "ints"), None)]
    return out


def _complete(state: tuple) -> bool:
    cmd, k, _vals, in_list = state
    return k == len(cmd.specs) or (in_list and k == len(cmd.specs) - 1)


def parse(line: str, cmds: list[Cmd]) -> Match:
    """Match ``line`` against ``cmds`` as the EOS parser does.

    Raises:
        ParseError: ``% Invalid input (at token N: 'x')``, ``% Ambiguous command`` or ``% Incomplete command``.
    """
    tokens = line.split()
    alive = [(c, 0, [], False) for c in cmds]
    for i, tok in enumerate(tokens):
        rest = line.split(None, i)[i] if i else line.strip()
        moves = [m for state in alive for m in _step(state, tok, rest)]
        words = {w for _s, w in moves if w is not None}
        if tok.lower() in words:
            moves = [(s, w) for s, w in moves if w in (None, tok.lower())]
        elif len(words) > 1:
            raise ParseError(AMBIGUOUS)
        if not moves:
            raise ParseError(INVALID.format(i=i, tok=tok), i)
        alive = [s for s, _w in moves]
        if any(s[1] == len(s[0].specs) and s[0].specs and s[0].specs[-1].kind == "rest" for s in alive):
            break
    done = [s for s in alive if _complete(s)]
    if not done:
        raise ParseError(INCOMPLETE)
    cmd, _k, vals, _in = done[0]
    vals = [canonical_ifname(v) if s.regex == _VALUES["ifname"] else v for v, s in zip(vals, cmd.specs)]
    return Match(cmd, [v for v, s in zip(vals, cmd.specs) if s.kind != "kw" or len(s.words) > 1])


def _c(modes: str, pattern: str, slot: str = "", line: str | None = None, action: str = "") -> Cmd:
    return Cmd(tuple(modes.split(",")), pattern, slot, line, action)


#: ECN threshold units; EOS also has ``milliseconds`` (not modelled: refused). ``max-mark-probability``
#: may be left out (avd ethernet-interface-tx-queues.j2 adds it only when set). The threshold ranges
#: per unit were not found in a public source: the lab takes 1..4294967295 (marked: not verified).
UNITS = "{kbytes|mbytes|bytes|segments}"
_ECN = ("random-detect ecn minimum-threshold <1-4294967295> " + UNITS + " maximum-threshold <1-4294967295> "
        + UNITS + " max-mark-probability <1-100>")

#: the configuration grammar. Ranges: mtu 68..9214 (EOS ``mtu ?`` <68-9214>, as the pydantic
#: model of an EOS fabric controller types it; the transcript refuses 10000 at token 1),
#: priorities / traffic classes / tx-queues 0..7, DSCP 0..63, percentages 1..100.
CONFIG_GRAMMAR = [
    _c(CONFIG, "hostname <name>", "hostname", "hostname {0}"),
    _c(CONFIG, "interface <ifname>", action="interface"),
    _c(CONFIG, "no interface <ifname>", action="no_interface"),
    _c(CONFIG, "qos map dscp <0-63>+ to traffic-class <0-7>", action="qos_map"),
    _c(CONFIG, "no qos map dscp <0-63>+ to traffic-class <0-7>", action="no_qos_map"),
    _c(CONFIG, "ip routing", "ip routing", "ip routing"),
    _c(CONFIG, "no ip routing", "ip routing", "no ip routing"),
    _c(CONFIG, "ip route <prefix> <ip>", "ip route {0}", "ip route {0} {1}"),
    _c(CONFIG, "no ip route <prefix>", "ip route {0}"),
    _c(CONFIG, "priority-flow-control pause watchdog default timeout <decimal>", "pfcwd timeout",
       "priority-flow-control pause watchdog default timeout {0}"),
    _c(CONFIG, "priority-flow-control pause watchdog default recovery-time <decimal>", "pfcwd recovery",
       "priority-flow-control pause watchdog default recovery-time {0}"),
    _c(CONFIG, "priority-flow-control pause watchdog default polling-interval <decimal>", "pfcwd polling",
       "priority-flow-control pause watchdog default polling-interval {0}"),
    _c(CONFIG, "priority-flow-control pause watchdog action {drop|errdisable|notify-only}", "pfcwd action",
       "priority-flow-control pause watchdog action {0}"),
    _c(IF, "description <text>", "description", "description {0}"),
    _c(IF, "no description", "description"),
    _c(IF, "mtu <68-9214>", "mtu", "mtu {0}"),
    _c(IF, "no mtu", "mtu"),
    _c(IF, "no switchport", "switchport", "no switchport"),
    _c(IF, "switchport", "switchport"),
    _c(IF, "ip address <prefix>", "ip address", "ip address {0}"),
    _c(IF, "no ip address", "ip address"),
    _c(IF, "qos trust {dscp|cos}", "qos trust", "qos trust {0}"),
    _c(IF, "no qos trust", "qos trust"),
    _c(IF, "priority-flow-control on", "pfc on", "priority-flow-control on"),
    _c(IF, "no priority-flow-control on", "pfc on"),
    _c(IF, "no priority-flow-control", "pfc on"),
    _c(IF, "priority-flow-control priority <0-7> no-drop", "pfc priority {0}", "priority-flow-control priority {0} no-drop"),
    _c(IF, "no priority-flow-control priority <0-7>", "pfc priority {0}"),
    _c(IF, "no priority-flow-control priority <0-7> no-drop", "pfc priority {0}"),
    _c(IF, "dcbx mode {ieee|cee}", "dcbx", "dcbx mode {0}"),
    _c(IF, "no dcbx mode", "dcbx"),
    _c(IF, "tx-queue <0-7>", action="tx_queue"),
    _c(TXQ, _ECN, "ecn", "random-detect ecn minimum-threshold {0} {1} maximum-threshold {2} {3} max-mark-probability {4}"),
    _c(TXQ, _ECN.rsplit(" max-mark", 1)[0], "ecn", "random-detect ecn minimum-threshold {0} {1} maximum-threshold {2} {3}"),
    _c(TXQ, "no random-detect ecn", "ecn"),
    _c(TXQ, "random-detect ecn count", "ecn count", "random-detect ecn count"),
    _c(TXQ, "no random-detect ecn count", "ecn count"),
    _c(TXQ, "bandwidth guaranteed percent <1-100>", "bw guaranteed", "bandwidth guaranteed percent {0}"),
    _c(TXQ, "no bandwidth guaranteed", "bw guaranteed"),
    _c(TXQ, "bandwidth percent <1-100>", "bw percent", "bandwidth percent {0}"),
    _c(TXQ, "no bandwidth percent", "bw percent"),
    _c(TXQ, "priority strict", "priority", "priority strict"),
    _c(TXQ, "no priority", "priority", "no priority"),
]

#: EOS interface- and config-mode keywords the lab does not model: they make abbreviations ambiguous as on the
#: device (``p`` is ``% Ambiguous command``) and are refused (never accepted without effect)
UNMODELLED = [_c(IF, w + " <text>", action="unmodelled") for w in ("phy", "ptp", "pim", "poe", "profile")] + \
    [_c(CONFIG, w + " <text>", action="unmodelled") for w in ("platform", "policy-map", "prefix-list", "peer-filter")]
#: what the lab prints for one of them (a lab text, not EOS's: it marks a limit of the stand-in)
UNMODELLED_TEXT = "% Not available in the fabtune lab stand-in"

def new_interface() -> dict:
    """An interface with nothing configured."""
    return {"lines": {}, "txq": {}}


def short_ifname(name: str) -> str:
    """``Ethernet1`` -> ``Et1`` as in the prompt (``(config-if-Et1)``)."""
    return name[:2] + re.search(r"\d+$", name).group(0)


def empty_config(ports: list[str]) -> dict:
    """A configuration with every physical interface present and nothing configured."""
    return {"globals": {}, "qos_map": {}, "interfaces": {p: new_interface() for p in [*ports, "Management1"]}}


class Cursor:
    """Where configuration lines go: the mode (config / if / txq), the interface and the tx-queue.

    :meth:`parse` tries the current mode, then each parent mode (EOS/IOS fall-through: a pasted
    configuration's ``interface Ethernet2`` typed in tx-queue mode of Ethernet1 goes to Ethernet2);
    the error shown is the one that got furthest (an incomplete or ambiguous line beats an invalid
    token; the current mode wins a tie). :meth:`apply` moves there and applies the line.
    """

    def __init__(self, ports: list[str]) -> None:
        self.ports = [*ports, "Management1"]
        self.mode, self.intf, self.txq = CONFIG, "", -1

    def parse(self, line: str, extra: list[Cmd] | None = None) -> tuple[Match, str]:
        """``(match, mode it matched in)``. Raises ParseError (the one that got furthest)."""
        first: ParseError | None = None
        mode: str | None = self.mode
        while mode is not None:
            cmds = [c for c in CONFIG_GRAMMAR + UNMODELLED if mode in c.modes] + ((extra or []) if mode == self.mode else [])
            try:
                match = parse(line, cmds)
                if match.cmd.action in ("interface", "no_interface"):
                    self._check_interface(line, match)
                return match, mode
            except ParseError as exc:  # the error that got furthest is shown (the current mode's on a tie)
                if first is None or _reach(exc) > _reach(first):
                    first = exc
            mode = PARENT[mode]
        assert first is not None
        raise first

    def _check_interface(self, line: str, match: Match) -> None:
        name = match.values[0]
        if name not in self.ports:  # a port the switch does not have (EOS's parser knows the hardware)
            i = 1 if match.cmd.action == "interface" else 2
            raise ParseError(INVALID.format(i=i, tok=line.split()[i]), i)

    def apply(self, cfg: dict, match: Match, mode: str) -> str:
        """Apply a configuration line that matched in ``mode``; returns what the switch prints."""
        self.mode = mode
        cmd, vals = match.cmd, match.values
        if cmd.action == "unmodelled":
            return UNMODELLED_TEXT
        if cmd.action:
            getattr(self, "_" + cmd.action)(cfg, vals)
            return ""
        target = self._target(cfg)
        slot = cmd.slot.format(*vals)
        if cmd.line is None:
            target.pop(slot, None)
        else:
            target[slot] = cmd.line.format(*vals)
        self._prune(cfg)
        return ""

    def _target(self, cfg: dict) -> dict:
        if self.mode == CONFIG:
            return cfg["globals"]
        intf = cfg["interfaces"].setdefault(self.intf, new_interface())
        return intf["lines"] if self.mode == IF else intf["txq"].setdefault(self.txq, {})

    def _prune(self, cfg: dict) -> None:
        """A tx-queue with nothing configured is not printed (nor kept)."""
        for intf in cfg["interfaces"].values():
            for queue in [q for q, lines in intf["txq"].items() if not lines]:
                del intf["txq"][queue]

    def _interface(self, cfg: dict, vals: list) -> None:
        self.mode, self.intf = IF, vals[0]
        cfg["interfaces"].setdefault(self.intf, new_interface())

    def _no_interface(self, cfg: dict, vals: list) -> None:
        cfg["interfaces"][vals[0]] = new_interface()  # a physical interface goes back to its defaults

    def _tx_queue(self, cfg: dict, vals: list) -> None:
        self.mode, self.txq = TXQ, vals[0]

    def _qos_map(self, cfg: dict, vals: list) -> None:
        for dscp in vals[0]:
            cfg["qos_map"][dscp] = vals[1]

    def _no_qos_map(self, cfg: dict, vals: list) -> None:
        for dscp in vals[0]:
            if cfg["qos_map"].get(dscp) == vals[1]:
                del cfg["qos_map"][dscp]

    def up(self) -> bool:
        """``exit`` below the config level: one mode up. False at the config level."""
        parent = PARENT[self.mode]
        if parent is None:
            return False
        self.mode = parent
        return True


def _reach(exc: ParseError) -> int:
    return exc.token if exc.token >= 0 else 1 << 20


def load_text(text: str, ports: list[str]) -> dict:
    """A configuration from its running-config text (``configure replace``): every line is
    replayed through the grammar from an empty configuration. Raises ParseError on a line EOS
    would refuse."""
    cfg, cursor = empty_config(ports), Cursor(ports)
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("!") or line == "end":
            continue
        match, mode = cursor.parse(line)
        cursor.apply(cfg, match, mode)
    return cfg
