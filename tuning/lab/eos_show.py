"""What the Arista EOS stand-in shows and says: the running-config layout, session diffs, the
``| json`` documents, the lab contract's ``switches/<name>.fabric.json`` state, EOS's exec-level
texts and commands, and the power-on configuration.

Layouts, to the character: shared/cases/cli/eos__running_config_roce_lines.txt (running-config),
eos__configure_session_roce_diff_commit.txt (``show session-config diffs``, ``show running-config
interfaces``), eos__show_configuration_sessions_detail_json_pre_4_32.txt (napalm-automation/napalm
#2166: sessions), eos__show_interfaces_json_mtu.txt (aristanetworks/anta tests: interfaces). JSON is
printed with ``indent=4`` as EOS's ``| json`` does in those transcripts.

Texts and where they come from (L = a guess, marked where used):

- ``% Invalid input (privileged mode required)``: ansible/ansible#33406 (``configure session`` at
  ``>``), ytti/oxidized#3468 (``show running-config`` at ``>``).
- ``Copy completed successfully.``: EOS's answer to ``copy`` / ``write memory`` as remembered (L: not
  in a cited capture).
- syslog lines: eos__commit_timer_confirm_abort_syslog.txt, SUNET/cnaas-nms#395; ``CONFIG_STARTUP``
  from a published EOS ``show logging`` (``Startup config saved from system:/running-config by
  USER on ...``). The origin ``on vty<N> (<address>)`` for an SSH login is L (the sources show
  ``command-api``, ``TerminAttr``, ``GNMI``).
"""

from __future__ import annotations

import difflib
import json
import re
import threading
from dataclasses import dataclass
from typing import Any

from tuning.lab.eos_config import CONFIG, IF, TXQ, Cmd, Match, empty_config, new_interface
from tuning.lab.fabric import Fabric, Switch
from tuning.lab.nvue_config import natural_key
from tuning.lab.nvue_show import Roce

#: the platform in the ``! device:`` header line (as in the transcript)
MODEL = "DCS-7060X5-64S"
#: EOS's MTU of a routed port without ``mtu`` (aristaeos.blogspot.com 2020/03 "Arista EOS MTU
#: Behavior (3) - L3 Routed Ethernet Ports": "default value is 1500")
ROUTED_DEFAULT_MTU = 1500
#: the MTU a switched (L2) port reports without ``mtu``: 9214, the EOS frame limit (the transcript's
#: value; not verified for an L2 port: a guess, and no lab port is L2 unless ``switchport`` is typed)
L2_DEFAULT_MTU = 9214
_UNIT_BYTES = {"bytes": 1, "kbytes": 1000, "mbytes": 1000000}

#: canonical order of an interface's lines and of a tx-queue's (avd ethernet-interfaces.j2 order;
#: ``dcbx`` after the PFC lines is L in the INDEX)
IF_ORDER = ["description", "mtu", "switchport", "ip address", "qos trust", "pfc on",
            *[f"pfc priority {p}" for p in range(8)], "dcbx"]
TXQ_ORDER = ["bw guaranteed", "bw percent", "priority", "ecn count", "ecn"]
#: global sections after the interfaces and the qos maps, each closed by ``!``
GLOBAL_SECTIONS = [["ip routing"], ["ip route"], ["pfcwd timeout", "pfcwd recovery", "pfcwd polling", "pfcwd action"]]


def _ordered(lines: dict[str, str], order: list[str]) -> list[str]:
    rank = {slot: i for i, slot in enumerate(order)}
    return [lines[s] for s in sorted(lines, key=lambda s: (rank.get(s, len(order)), natural_key(s)))]


def render_interface(name: str, intf: dict) -> list[str]:
    """``interface NAME`` and its body: lines indented 3, each tx-queue after ``   !`` with its lines at 6."""
    out = [f"interface {name}"] + ["   " + ln for ln in _ordered(intf["lines"], IF_ORDER)]
    for queue in sorted(intf["txq"]):
        out += ["   !", f"   tx-queue {queue}"] + ["      " + ln for ln in _ordered(intf["txq"][queue], TXQ_ORDER)]
    return out


def render(cfg: dict) -> list[str]:
    """The configuration body as ``show running-config`` prints it after its two ``! ...`` header
    lines: ``!``, hostname, interfaces (natural order), qos maps (grouped by traffic class), the
    global sections, each section closed by ``!``, then ``end``."""
    g = cfg["globals"]
    out = ["!"] + ([g["hostname"], "!"] if "hostname" in g else [])
    for name in sorted(cfg["interfaces"], key=natural_key):
        out += render_interface(name, cfg["interfaces"][name]) + ["!"]
    by_tc: dict[int, list[int]] = {}
    for dscp, tc in sorted(cfg["qos_map"].items()):
        by_tc.setdefault(tc, []).append(dscp)
    if by_tc:
        out += [f"qos map dscp {' '.join(map(str, d))} to traffic-class {tc}" for tc, d in sorted(by_tc.items())] + ["!"]
    for section in GLOBAL_SECTIONS:
        slots = [s for s in g if any(s == p or s.startswith(p + " ") for p in section)]
        if slots:
            out += _ordered({s: g[s] for s in slots}, section) + ["!"]
    return out + ["end"]




def running_config(cfg: dict, hostname: str, version: str, command: str = "show running-config") -> str:
    """``show running-config``: ``! Command: ...``, ``! device: NAME (MODEL, EOS-VERSION)``, the body."""
    head = [f"! Command: {command}", f"! device: {hostname} ({MODEL}, EOS-{version})"]
    return "\n".join(head + render(cfg)) + "\n"


def session_diff(running: dict, session: dict, name: str) -> str:
    """``show session-config diffs``: a unified diff with 3 lines of context of the two bodies.

    The two ``! Command`` / ``! device`` header lines are left out of both sides (a guess: only the
    hunks' line numbers depend on it). Empty when the session changes nothing.
    """
    lines = difflib.unified_diff(render(running), render(session), "system:/running-config",
                                 f"session:/{name}-session-config", n=3, lineterm="")
    text = "\n".join(lines)
    return text + "\n" if text else ""


def port_mtu(intf: dict, oper: int | None = None) -> int:
    """A port's MTU: an injected operational MTU, else its ``mtu``, else the default of its kind."""
    if oper is not None:
        return oper
    mtu = intf["lines"].get("mtu")
    if mtu:
        return int(mtu.split()[1])
    return ROUTED_DEFAULT_MTU if "switchport" in intf["lines"] else L2_DEFAULT_MTU


def interfaces_json(cfg: dict, names: list[str], oper: dict[str, int]) -> str:
    """``show interfaces [NAME] | json``: per interface the keys of eos__show_interfaces_json_mtu.txt;
    ``mtu`` is the operational MTU (an injected ``oper-mtu`` fault shows here)."""
    out = {}
    for name in names:
        intf = cfg["interfaces"][name]
        routed = "switchport" in intf["lines"] or name.startswith("Management")
        out[name] = {"name": name, "forwardingModel": "routed" if routed else "bridged",
                     "lineProtocolStatus": "up", "interfaceStatus": "connected", "hardware": "ethernet",
                     "mtu": port_mtu(intf, oper.get(name)) if not name.startswith("Management") else ROUTED_DEFAULT_MTU,
                     "l3MtuConfigured": "mtu" in intf["lines"], "l2Mru": 0}
    return json.dumps({"interfaces": out}, indent=4) + "\n"


def sessions_json(sessions: dict, version: str) -> str:
    """``show configuration sessions detail | json``.

    Before 4.32 a session under a running commit timer has state ``pendingCommitTimer`` and
    ``commitBy`` (epoch seconds). From 4.32 on (napalm-automation/napalm#2166, whose text reads
    ``"state": "committed"``, and napalm#2281's reader) it shows ``committed`` without ``commitBy``,
    and the top-level keys ``commitTimerSessionName`` / ``commitTimerExpireTime`` name the timer
    (after the fixed keys: their position is a guess). ``sessions`` maps name -> Session.
    """
    new = _version_tuple(version) >= (4, 32)
    doc: dict = {"sessions": {}}
    timer = None
    for name, s in sessions.items():
        entry: dict = {"state": s.state}
        if s.state != "pending":
            entry["completedTime"] = s.completed_time
        if s.state == "pendingCommitTimer":
            timer = (name, s.commit_by)
            if new:
                entry["state"] = "committed"
            else:
                entry["commitBy"] = s.commit_by
        entry.update({"commitUser": s.commit_user, "description": "", "instances": {}})
        doc["sessions"][name] = entry
    doc.update({"maxSavedSessions": 1, "maxOpenSessions": 5, "mergeOnCommit": False,
                "saveToStartupConfigOnCommit": False})
    if new and timer:
        doc.update({"commitTimerSessionName": timer[0], "commitTimerExpireTime": timer[1]})
    return json.dumps(doc, indent=4) + "\n"


def _version_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _ecn_lines(intf: dict) -> dict[int, str]:
    return {q: lines["ecn"] for q, lines in intf["txq"].items() if "ecn" in lines}


def _to_bytes(value: str, unit: str) -> int | None:
    """An ECN threshold in bytes; ``segments`` (a buffer cell count that depends on the chip) gives None."""
    return int(value) * _UNIT_BYTES[unit] if unit in _UNIT_BYTES else None


def roce_state(cfg: dict, ports: list[str]) -> Roce:
    """The RoCE state of the lab contract, from the EOS configuration of ``ports``: never more
    lenient than the weakest port (a value every port does not share is None / left out).

    ``enabled``: every port has ``priority-flow-control on`` or an ECN tx-queue. ``mode``: lossless
    when every port has PFC on and the same single no-drop priority P, else lossy when enabled.
    ``trust``: ``qos trust dscp`` on every port -> dscp, ``cos`` -> pcp; a port without ``qos trust``
    counts as unknown (None): EOS's default trust of a routed port (dscp, from memory) was not
    found in a public source, so the lab credits only what is configured. ``dscp_to_switch_priority``:
    the global ``qos map dscp D to traffic-class T`` entries; the lab treats traffic class T as
    switch priority T (EOS maps a TC to the tx-queue and PFC priority of the same number by
    default). ``ecn_tcs``: tx-queues every port marks ECN on; thresholds: those of the lossless
    (else the first) ECN queue when every port has the same line.
    """
    intfs = [cfg["interfaces"].get(p, new_interface()) for p in ports]
    if not intfs:
        return Roce()
    r = Roce(dscp_to_switch_priority=dict(cfg["qos_map"]))
    ecn = [_ecn_lines(i) for i in intfs]
    r.enabled = all("pfc on" in i["lines"] or e for i, e in zip(intfs, ecn))
    prios = [{int(s.split()[-1]) for s in i["lines"] if s.startswith("pfc priority ")} for i in intfs]
    if all(p == prios[0] and len(p) == 1 for p in prios):
        r.pfc_priority = next(iter(prios[0]))
    lossless = r.pfc_priority is not None and all("pfc on" in i["lines"] for i in intfs)
    r.mode = "lossless" if lossless else "lossy" if r.enabled else None
    r.lossless_tc = r.pfc_priority if lossless else None
    trusts = {i["lines"].get("qos trust") for i in intfs}
    r.trust = {"qos trust dscp": "dscp", "qos trust cos": "pcp"}.get(trusts.pop()) if len(trusts) == 1 else None
    r.ecn_tcs = sorted(set.intersection(*[set(e) for e in ecn]))
    if r.ecn_tcs:
        queue = r.lossless_tc if r.lossless_tc in r.ecn_tcs else r.ecn_tcs[0]
        lines = {e[queue] for e in ecn}
        if len(lines) == 1:
            words = lines.pop().split()  # random-detect ecn minimum-threshold N U maximum-threshold N U ...
            r.ecn_min_bytes, r.ecn_max_bytes = _to_bytes(words[3], words[4]), _to_bytes(words[6], words[7])
    return r


def fabric_state(cfg: dict, ports: list[str], oper: dict[str, int]) -> dict:
    """``{"ports": {name: {"mtu": N}}, "roce": Roce.as_json()}`` (lab contract, docs/lab.md)."""
    mtus = {p: port_mtu(cfg["interfaces"].get(p, new_interface()), oper.get(p)) for p in ports}
    return {"ports": {p: {"mtu": m} for p, m in mtus.items()}, "roce": roce_state(cfg, ports).as_json()}


def filter_lines(text: str, pattern: str) -> str:
    """``| include REGEX``: the lines of ``text`` that match (EOS takes a regular expression)."""
    try:
        rx = re.compile(pattern)
    except re.error:
        rx = re.compile(re.escape(pattern))
    return "".join(ln + "\n" for ln in text.splitlines() if rx.search(ln))


@dataclass
class Session:
    """A configuration session: its configuration and, once committed, its commit state.

    ``state``: ``pending``, ``pendingCommitTimer`` or ``completed``; ``before``: running before a
    timer commit (what expiry or abort goes back to).
    """

    name: str
    config: dict
    state: str = "pending"
    completed_time: float | None = None
    commit_by: float | None = None
    commit_user: str = ""
    before: dict | None = None
    timer: threading.Timer | None = None


# ----- exec-level texts, commands and the power-on configuration --------------------------
MAX_OPEN_SESSIONS = 5  # eos__show_configuration_sessions_detail_json_pre_4_32.txt maxOpenSessions
PRIVILEGED = "% Invalid input (privileged mode required)"
MAX_SESSIONS = "% Maximum number of pending sessions has been reached"  # arista.eos terminal/eos.py
COPY_OK = "Copy completed successfully."
#: L: a commit while another session's commit timer runs (a public note paraphrases EOS as
#: "another session ... is pending commit timer"; the exact text was not found)
TIMER_PENDING = "% Cannot commit session {name}: session {other} is pending commit timer"
#: L: a session name that is not there, a missing flash file (texts not found in a public source)
NO_SESSION = "% Session {name} does not exist"
NO_FILE = "% Error copying flash:{file} to running-config (No such file or directory)"
#: L: a timer session entered again ("entering the session again fails with pendingCommitTimer")
IN_TIMER = "% Cannot enter session {name} (pendingCommitTimer)"
#: the text output of ``show interfaces`` / ``show configuration sessions`` is not modelled (lab text)
JSON_ONLY = "% Only '| json' of this command is available in the fabtune lab stand-in"
UNCONVERTED = "% This is an unconverted command"  # EOS's answer to ``| json`` on a text-only command (L)


def _x(pattern: str, action: str, privileged: bool = True, modes: str = "exec") -> Cmd:
    return Cmd(tuple(modes.split(",")), pattern, action=action, privileged=privileged)


_ANY = f"exec,{CONFIG},{IF},{TXQ}"
#: exec commands (``modes`` ``exec``) and the ones also valid in every configuration mode
EXEC_GRAMMAR = [
    _x("enable", "enable", False), _x("disable", "enable"), _x("exit", "exit", False),
    _x("terminal width <10-32767>", "width", False), _x("terminal length <0-32767>", "length", False),
    _x("configure", "configure"), _x("configure terminal", "configure"),
    _x("configure session", "session"), _x("configure session <name>", "session"),
    _x("configure session <name> commit", "session_commit"),
    _x("configure session <name> commit timer <hh:mm:ss>", "session_commit"),
    _x("configure session <name> abort", "session_abort"),
    _x("configure replace <file>", "replace"),
    _x("copy running-config startup-config", "write", modes=_ANY), _x("copy running-config <file>", "checkpoint", modes=_ANY),
    _x("write", "write", modes=_ANY), _x("write memory", "write", modes=_ANY),
    _x("show running-config", "show_running", modes=_ANY),
    _x("show running-config interfaces <ifname>", "show_running_intf", modes=_ANY),
    _x("show startup-config", "show_startup", modes=_ANY),
    _x("show session-config named <name> diffs", "show_named_diff", modes=_ANY),
    _x("show configuration sessions detail", "show_sessions", modes=_ANY),
    _x("show interfaces", "show_interfaces", False, _ANY), _x("show interfaces <ifname>", "show_interfaces", False, _ANY),
    _x("show logging", "show_logging", False, _ANY),
]
_CONFIG_MODES = f"{CONFIG},{IF},{TXQ}"
#: in every configuration mode; SESSION_GRAMMAR only inside a session
MODE_GRAMMAR = [_x("exit", "up", modes=_CONFIG_MODES), _x("end", "end", modes=_CONFIG_MODES)]
SESSION_GRAMMAR = [_x("commit", "commit", modes=_CONFIG_MODES), _x("commit timer <hh:mm:ss>", "commit", modes=_CONFIG_MODES),
                   _x("abort", "abort", modes=_CONFIG_MODES), _x("show session-config diffs", "show_diff", modes=_CONFIG_MODES)]
#: commands that have a ``| json`` form
JSON_ACTIONS = {"show_sessions", "show_interfaces"}


def seconds(hms: str) -> int:
    """``HH:MM:SS`` -> seconds."""
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s


def initial_config(switch: Switch, fabric: Fabric | None) -> dict:
    """The power-on configuration: hostname, every port routed (``no switchport``) with a
    description of its neighbour when ``fabric`` knows it (``SRV-<node>_<netdev>`` for a node
    cable, as the transcript's ``SRV-GPU01_eth0``; ``P2P_<switch>_<port>`` for a switch link: the
    lab's choice), Management1 with an address of 192.0.2.0/24, ``ip routing`` and a default route."""
    cfg = empty_config(list(switch.ports))
    peers: dict[str, str] = {}
    index = 0
    if fabric is not None:
        for node in fabric.nodes:
            peers.update({n.switch_port: f"SRV-{node.name}_{n.netdev}" for n in node.nics if n.switch == switch.name})
        for link in fabric.links:
            for a, ap, b, bp in ((link.a, link.a_port, link.b, link.b_port), (link.b, link.b_port, link.a, link.a_port)):
                if a == switch.name:
                    peers[ap] = f"P2P_{b}_{bp}"
        index = [s.name for s in fabric.switches].index(switch.name) if switch in fabric.switches else 0
    for port in switch.ports:
        lines = cfg["interfaces"][port]["lines"]
        if port in peers:
            lines["description"] = f"description {peers[port]}"
        lines["switchport"] = "no switchport"
    cfg["interfaces"]["Management1"]["lines"]["ip address"] = f"ip address 192.0.2.{41 + index}/24"
    cfg["globals"].update({"hostname": f"hostname {switch.name}", "ip routing": "ip routing",
                           "ip route 0.0.0.0/0": "ip route 0.0.0.0/0 192.0.2.1"})
    return cfg


class ShowCommands:
    """The ``show`` commands of :class:`tuning.lab.eos.EosTerminal` (``self.sw`` is its switch,
    ``self.session`` the session it is in)."""

    sw: Any
    session: str | None

    def _do_show_running(self, m: Match) -> str:
        return self.sw.running_text()

    def _do_show_running_intf(self, m: Match) -> str:
        intf = self.sw.running["interfaces"].get(m.values[0])
        return "\n".join(render_interface(m.values[0], intf)) + "\n" if intf else ""

    def _do_show_startup(self, m: Match) -> str:
        return running_config(self.sw.startup, self.sw.hostname, self.sw.version, "show startup-config")

    def _do_show_diff(self, m: Match) -> str:
        assert self.session is not None
        return self._diff(self.session)

    def _do_show_named_diff(self, m: Match) -> str:
        return self._diff(m.values[0])

    def _diff(self, name: str) -> str:
        s = self.sw.sessions.get(name)
        if s is None:
            return NO_SESSION.format(name=name)
        return session_diff(self.sw.running, s.config, name)

    def _do_show_sessions(self, m: Match, as_json: bool) -> str:
        return sessions_json(self.sw.sessions, self.sw.version) if as_json else JSON_ONLY

    def _do_show_interfaces(self, m: Match, as_json: bool) -> str:
        names = m.values or [*self.sw.ports, "Management1"]
        if not as_json:
            return JSON_ONLY
        return interfaces_json(self.sw.running, names, self.sw.faults().oper_mtu)

    def _do_show_logging(self, m: Match) -> str:
        return "".join(line + "\n" for line in self.sw.log)
