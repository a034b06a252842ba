"""A node's InfiniBand HCA ports: read in one round trip, judged port by port against ``ib_ports`` (issue 22).

Read (:func:`read_ports`): one shell command over the Host contract reads, for every HCA under
``/sys/class/infiniband`` and every port of it, ``state``, ``phys_state``, ``rate``, ``lid``, ``sm_lid``,
``link_layer``, ``gids/0`` (the port GUID), every ``counters/<name>`` and the used ``pkeys/<n>`` entries (all with the shell's
``read`` builtin: no fork per file), as ``HCA/PORT/FILE<TAB>VALUE`` lines, then, in the same command,
rdma-core's ``ibv_devinfo`` for each port's ``active_mtu`` (sysfs does not hold it; on an IB port it is
the MTU the link runs, the lower of both ends' PortInfo ``MtuCap``). Formats: the kernel's
(:mod:`tuning.parsers.ib_sysfs`) and ``ibv_devinfo``'s (:mod:`tuning.parsers.ibv_devinfo`). A node
without ``ibv_devinfo`` (rdma-core not installed) reads its ports all the same; only an intent that asks
``active_mtu`` needs it.

Judge (:func:`judge`): EVERY port of every HCA the intent names (:class:`tuning.model.ib_ports.IbPortsSpec`),
never "any port up" (NHC ``check_hw_ib`` passes a node as soon as one port is up at the rate, so one
good HCA of eight passes the node). Each problem is its own :class:`~tuning.node.base.Finding`, naming
node, HCA and port, with the sysfs value read as evidence:

=======================  ==================================================================
``ib-hca-missing``       an HCA the intent names is not under ``/sys/class/infiniband``
``ib-not-infiniband``    its port's ``link_layer`` is not ``InfiniBand`` (a VPI card in Ethernet mode)
``ib-port-not-active``   ``state`` is not ``4: ACTIVE``
``ib-port-phys-down``    ``phys_state`` is not ``5: LinkUp``
``ib-width-degraded``    an ACTIVE port's ``rate`` runs fewer lanes than the intent's width
``ib-speed-degraded``    an ACTIVE port's ``rate`` runs a slower lane speed than the intent's
``ib-no-sm``             ``sm_lid`` is ``0x0``: no subnet manager configured the port
``ib-no-lid``            ``lid`` is ``0x0``: the port has no LID
``ib-mtu-below``         an ACTIVE port's ``active_mtu`` is below the intent's (``active_mtu``)
=======================  ==================================================================

A port that cannot be read (the command failed, a file of it unreadable, a value not in the kernel's
format) is a harness error (:class:`IbReadError`), never a fabric fault and never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tuning.errors import ParseError, TuningError
from tuning.model.ib_ports import IbPortsSpec
from tuning.node.base import Finding
from tuning.parsers.ib_sysfs import (LANE_GBPS, IbRate, parse_counter, parse_gid, parse_hex, parse_numbered,
                                     parse_rate)
from tuning.parsers.ibv_devinfo import parse_ibv_devinfo
from tuning.transport.base import Host, q, sysroot_path

__all__ = ["CODES", "DOMAIN", "IbPort", "IbReadError", "judge", "parse_ports", "ports_command", "read_ports"]

DOMAIN = "ib_ports"
#: the finding codes of :func:`judge` (module docstring), the most severe first
CODES = ("ib-hca-missing", "ib-not-infiniband", "ib-port-not-active", "ib-port-phys-down", "ib-no-sm", "ib-no-lid",
         "ib-width-degraded", "ib-speed-degraded", "ib-mtu-below")
CLASS_DIR = "/sys/class/infiniband"
#: the port files every port must give (the counters and pkeys are read as the port lists them)
PORT_FILES = ("state", "phys_state", "rate", "lid", "sm_lid", "link_layer", "gids/0")
#: what :meth:`IbPort.view` gives of a port, as the kernel prints it (plus ``guid``)
VIEW_FILES = ("state", "phys_state", "rate", "lid", "sm_lid")
_UNREADABLE = "@@unreadable"
#: the line between the sysfs lines and ``ibv_devinfo``'s output; its exit status follows as ``@@rc=N``
_DEVINFO_MARK = "@@ibv_devinfo"


class IbReadError(TuningError):
    """An HCA port could not be read (a harness error: never judged as a fabric fault)."""


@dataclass
class IbPort:
    """One HCA port as read from sysfs: ``raw`` holds every file read (``state`` -> ``4: ACTIVE``,
    ``counters/symbol_error`` -> ``0``, ``pkeys/0`` -> ``0xffff``), exactly as printed."""

    hca: str
    port: int
    raw: dict[str, str] = field(default_factory=dict)
    #: ``ibv_devinfo``'s ``active_mtu`` in bytes, None with ``mtu_error`` saying why it was not read
    mtu: int | None = None
    mtu_error: str | None = None

    def value(self, name: str) -> str:
        """The file ``name`` as read. Raises IbReadError when the port gave none or it was unreadable."""
        v = self.raw.get(name)
        if v is None or v == _UNREADABLE:
            raise IbReadError(f"cannot read {CLASS_DIR}/{self.hca}/ports/{self.port}/{name}", phase="collect")
        return v

    @property
    def active_mtu(self) -> int:
        """``ibv_devinfo``'s ``active_mtu`` in bytes. Raises IbReadError naming why it was not read."""
        if self.mtu is None:
            raise IbReadError(f"cannot read the active MTU of {self.hca} port {self.port}: "
                              f"{self.mtu_error or 'ibv_devinfo does not list it'}", phase="collect")
        return self.mtu

    @property
    def counters(self) -> dict[str, int | None]:
        """``counters/<name>`` -> its count (None: ``N/A (no PMA)``)."""
        return {k.split("/", 1)[1]: parse_counter(self.value(k)) for k in sorted(self.raw) if k.startswith("counters/")}

    def view(self) -> dict[str, str]:
        """What the host reads of this port, for the join with the SM's and the switch's views
        (:mod:`tuning.burnin.ib_views`): ``guid`` (``0x0c42a10300000101``, the port GUID of ``gids/0``)
        and :data:`VIEW_FILES` as the kernel prints them (``state`` ``4: ACTIVE``, ``lid`` ``0x2``),
        each checked against the kernel's format. Raises IbReadError (unreadable, or not that format)."""
        try:
            out = {"guid": f"{parse_gid(self.value('gids/0'))[1]:#018x}"}
            for name in VIEW_FILES:
                out[name] = self.value(name).strip()
            parse_numbered(out["state"], "state")
            parse_numbered(out["phys_state"], "phys_state")
            parse_rate(out["rate"])
            parse_hex(out["lid"], "lid")
            parse_hex(out["sm_lid"], "sm_lid")
        except ParseError as e:
            raise IbReadError(f"{self.hca} port {self.port}: {e.message}", phase="collect") from e
        return out

    @property
    def pkeys(self) -> dict[int, int]:
        """The used pkey table entries: index -> pkey with its membership bit (``0: 0xffff``)."""
        return {int(k.split("/", 1)[1]): parse_hex(self.value(k), k) for k in self.raw if k.startswith("pkeys/")}


def ports_command(sysroot: str) -> str:
    """The one command that reads every HCA port under ``sysroot`` (module docstring); prints
    ``HCA/PORT/FILE<TAB>VALUE`` lines, ``@@unreadable`` for a file that could not be read, nothing
    when the node has no ``/sys/class/infiniband``."""
    base = q(sysroot_path(sysroot, CLASS_DIR))
    files = " ".join(PORT_FILES)
    return (f"cd {base} 2>/dev/null || exit 0; "
            "r() { v=; if { IFS= read -r v || [ -n \"$v\" ]; } < \"$2\" 2>/dev/null; "
            f"then printf '%s\\t%s\\n' \"$1\" \"$v\"; else printf '%s\\t{_UNREADABLE}\\n' \"$1\"; fi; }}; "
            "for d in *; do [ -d \"$d/ports\" ] || continue; for p in \"$d\"/ports/*; do [ -d \"$p\" ] || continue; "
            f"for f in {files}; do r \"$p/$f\" \"$p/$f\"; done; "
            "for f in \"$p\"/counters/*; do [ -e \"$f\" ] && r \"$p/counters/${f##*/}\" \"$f\"; done; "
            "for f in \"$p\"/pkeys/*; do [ -e \"$f\" ] || continue; v=; { IFS= read -r v; } < \"$f\" 2>/dev/null; "
            "[ \"$v\" = 0x0000 ] || r \"$p/pkeys/${f##*/}\" \"$f\"; done; done; done; "
            f"echo {_DEVINFO_MARK}; ibv_devinfo 2>&1; echo \"@@rc=$?\"")


def parse_ports(text: str) -> dict[str, list[IbPort]]:
    """:func:`ports_command`'s output -> HCA -> its ports in port order, each with its ``ibv_devinfo``
    active MTU or why there is none (:attr:`IbPort.mtu_error`: judged only when the intent asks it).

    Raises:
        IbReadError: a line that is not ``HCA/PORT/FILE<TAB>VALUE`` (the output was cut or mixed).
    """
    ports: dict[tuple[str, int], IbPort] = {}
    sysfs, mark, devinfo = text.partition(f"{_DEVINFO_MARK}\n")
    for line in sysfs.splitlines():
        key, sep, value = line.partition("\t")
        hca, _, rest = key.partition("/ports/")
        num, _, name = rest.partition("/")
        if not sep or not hca or not num.isdigit() or not name:
            raise IbReadError(f"the HCA port read printed {line[:120]!r}; expected HCA/ports/N/FILE<TAB>VALUE",
                              phase="collect")
        ports.setdefault((hca, int(num)), IbPort(hca, int(num))).raw[name] = value
    _attach_mtus(ports, devinfo if mark else None)
    out: dict[str, list[IbPort]] = {}
    for (hca, _num), port in sorted(ports.items()):
        out.setdefault(hca, []).append(port)
    return out


def _attach_mtus(ports: dict[tuple[str, int], IbPort], devinfo: str | None) -> None:
    """Each port's ``active_mtu`` from ``ibv_devinfo``'s output and ``@@rc=N`` line (None: the read printed
    none), or the reason it has none: the tool failed (its exit status and first line), or printed what
    the parser refuses."""
    body, sep, rc = (devinfo or "").rpartition("@@rc=")
    why, mtus = None, {}
    if devinfo is None or not sep:
        why = "the read printed no ibv_devinfo output (cut short?)"
    elif rc.strip() != "0":
        why = f"ibv_devinfo exited {rc.strip()}: {(body.strip().splitlines() or ['no output'])[0][:200]}"
    else:
        try:
            mtus = {(d.hca_id, p.port): p.active_mtu for d in parse_ibv_devinfo(body).devices for p in d.ports}
        except ParseError as e:
            why = e.message  # names ibv_devinfo and the line
    for key, port in ports.items():
        port.mtu = mtus.get(key)
        port.mtu_error = why if port.mtu is None else None


def read_ports(host: Host) -> dict[str, list[IbPort]]:
    """Every HCA port of ``host`` in one round trip (unprivileged: sysfs is world-readable).

    Raises:
        CommandError: the command failed (its exit code and stderr).  IbReadError: see :func:`parse_ports`.
    """
    res = host.run(ports_command(host.sysroot), privileged=False).check(host.name, "collect")
    return parse_ports(res.stdout)


def _finding(node: str, port: IbPort, code: str, what: str, evidence: str) -> Finding:
    return Finding(device=node, domain=DOMAIN, code=code, message=f"{port.hca} port {port.port}: {what}",
                   evidence=evidence)


def _judge_port(node: str, port: IbPort, intent: IbPortsSpec) -> list[Finding]:
    """The findings of one port (module docstring). Raises IbReadError / ParseError (harness)."""
    layer = port.value("link_layer")
    if layer != "InfiniBand":
        return [_finding(node, port, "ib-not-infiniband", f"link_layer {layer}, not InfiniBand", f"link_layer={layer}")]
    out = []
    state, phys = port.value("state"), port.value("phys_state")
    if parse_numbered(state, "state")[1] != "ACTIVE":
        out.append(_finding(node, port, "ib-port-not-active", f"state {state}, not ACTIVE", f"state={state}"))
    if parse_numbered(phys, "phys_state")[1] != "LinkUp":
        out.append(_finding(node, port, "ib-port-phys-down", f"phys_state {phys}, not LinkUp", f"phys_state={phys}"))
    if not out:
        out += _judge_rate(node, port, parse_rate(port.value("rate")), intent)
        if intent.active_mtu is not None and port.active_mtu < intent.active_mtu:
            out.append(_finding(node, port, "ib-mtu-below", f"active_mtu {port.active_mtu}, intent {intent.active_mtu}",
                                f"ibv_devinfo active_mtu={port.active_mtu}"))
    for name, code, what in (("sm_lid", "ib-no-sm", "sm_lid 0x0: no subnet manager configured it"),
                             ("lid", "ib-no-lid", "lid 0x0: no LID assigned")):
        raw = port.value(name)
        if parse_hex(raw, name) == 0:
            out.append(_finding(node, port, code, what, f"{name}={raw}"))
    return out


def _judge_rate(node: str, port: IbPort, rate: IbRate, intent: IbPortsSpec) -> list[Finding]:
    out, evidence = [], f"rate={port.value('rate')}"
    if rate.lanes < intent.lanes:
        out.append(_finding(node, port, "ib-width-degraded", f"width {rate.width}, intent {intent.width}", evidence))
    if LANE_GBPS[rate.speed] < LANE_GBPS[intent.speed]:
        out.append(_finding(node, port, "ib-speed-degraded", f"speed {rate.speed}, intent {intent.speed}", evidence))
    return out


def judge(node: str, hcas: dict[str, list[IbPort]], intent: IbPortsSpec) -> list[Finding]:
    """Every port of every HCA ``intent`` names, judged (module docstring); [] when all are as intended.

    Args:
        node: the inventory name.  hcas: :func:`read_ports`'s result.  intent: the node's ``ib_ports``.

    Raises:
        IbReadError: a port file unreadable or not in the kernel's format (a harness error).
    """
    out = []
    for name in intent.hcas:
        ports = hcas.get(name)
        if not ports:
            seen = ", ".join(sorted(hcas)) or "none"
            out.append(Finding(device=node, domain=DOMAIN, code="ib-hca-missing",
                               message=f"{name}: no such HCA with ports under {CLASS_DIR}",
                               evidence=f"{CLASS_DIR}: {seen}"))
            continue
        for port in ports:
            try:
                out += _judge_port(node, port, intent)
            except ParseError as e:
                raise IbReadError(f"{name} port {port.port}: {e.message}", phase="collect") from e
    return out
