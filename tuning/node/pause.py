"""Link-level (802.3x, "global") pause of each RDMA NIC: read with ``ethtool -a IF``, set with
``ethtool -A IF rx off tx off`` (parser :mod:`tuning.parsers.ethtool_pause`).

With PFC on the lossless priority, global pause must be off: RX on lets the switch port's pause
frames stop every priority of the NIC, TX on makes the NIC pause everything the switch sends it
(NVIDIA's RoCE configuration guides turn it off). mlx5 loads with both on. Pause on beside PFC is
always reported with its direction (``global-pause-rx`` / ``global-pause-tx``), against the PFC the
plan leaves: the profile's ``nic_qos.pfc_priority`` when fabtune manages the NIC's QoS (the plan sets
it, so an untuned NIC is reported before its PFC is on, whichever domains were collected), else the
NIC's own PFC as ``mlnx_qos`` reads it (when domain ``nic_qos`` was collected). It is changed only with ``pause.global_pause: off``: key
``pause/<netdev>`` = ``rx off tx off``. The value does not survive a reboot (the driver loads with
its defaults), so the domain is re-applied by the boot script.

Example profile::

    pause: {global_pause: "off"}     # "report" (default): only report it
"""

from __future__ import annotations

from tuning.errors import ParseError
from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, Finding, NodeFacts, Unfit, decode
from tuning.parsers import parse
from tuning.parsers.ethtool_pause import PauseParams, parse_ethtool_a, pause_findings
from tuning.transport.base import q

OFF = "rx off tx off"


def _pause(facts: NodeFacts, netdev: str) -> PauseParams | None:
    """``ethtool -a`` of ``netdev`` as read; None when ethtool failed. Raises ParseError on garbage."""
    raw = decode(facts.raw.get(f"pause/{netdev}", ABSENT))
    return None if raw == ABSENT else parse_ethtool_a(raw)


def _pfc(spec: NodeSpec, facts: NodeFacts, netdev: str) -> tuple[list[int], str]:
    """PFC priorities of the NIC once the plan is applied, and where they come from: the profile's
    (planned) when it manages the NIC's QoS, with what ``mlnx_qos`` reads now when it differs; else
    the NIC's own (``mlnx_qos``)."""
    now: list[int] | None = None
    raw = decode(facts.raw.get(f"mlnx_qos/{netdev}", ABSENT))
    if raw != ABSENT:
        try:
            st = parse("mlnx_qos", raw)
            if not getattr(st, "failure", None):
                now = list(st.pfc_priorities)
        except ParseError:
            pass
    if spec.nic_qos is not None:
        planned = [spec.nic_qos.pfc_priority]
        return planned, "planned: profile nic_qos.pfc_priority" + (f"; mlnx_qos now {now}" if now not in (None, planned) else "")
    if now is None:
        return [], "not read (mlnx_qos unavailable) and not in the profile (nic_qos unset)"
    return now, "mlnx_qos"


class PauseDomain(Domain):
    """``pause/<netdev>`` = ``rx on|off tx on|off`` (only with ``pause.global_pause: off``)."""

    name = "pause"
    boot_script = True

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        return [f"bp {q('pause/' + n.netdev)} ethtool -a {q(n.netdev)}" for n in spec.nics]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.pause.global_pause != "off":
            return {}
        out = {}
        for nic in spec.nics:
            st = _pause(facts, nic.netdev)
            out[f"pause/{nic.netdev}"] = st.value() if st is not None and st.failure is None else ABSENT
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        if spec.pause.global_pause != "off":
            return {}
        for i, nic in enumerate(spec.nics):
            st = _pause(facts, nic.netdev) if facts.raw else None
            if facts.raw and (st is None or st.failure is not None):
                why = st.failure.message if st is not None and st.failure else "`ethtool -a` failed"
                raise Unfit(f"nics.{i}.netdev", f"the link-level pause of {nic.netdev} cannot be read ({why}); "
                                                "allowed: pause.global_pause report for such a NIC")
        return {f"pause/{nic.netdev}": OFF for nic in spec.nics}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None
        words = value.split()
        if len(words) != 4 or words[0] != "rx" or words[2] != "tx" or not {words[1], words[3]} <= {"on", "off"}:
            return None
        return f"ethtool -A {q(key.split('/', 1)[1])} rx {words[1]} tx {words[3]}"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        return f"ethtool -a {q(key.split('/', 1)[1])}"

    def parse_read(self, key: str, output: str) -> str:
        st = parse_ethtool_a(output)
        return ABSENT if st.failure is not None else st.value()

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """``global-pause-rx`` / ``global-pause-tx`` for each NIC with pause on beside PFC."""
        out = []
        for nic in spec.nics:
            try:
                st = _pause(facts, nic.netdev)
            except ParseError as e:
                out.append(Finding(device, self.name, "pause-unreadable", f"{nic.netdev}: `ethtool -a` output: {e}"))
                continue
            if st is None or st.failure is not None:
                continue
            pfc, source = _pfc(spec, facts, nic.netdev)
            for f in pause_findings(nic.netdev, bool(st.rx), bool(st.tx), pfc):
                out.append(Finding(device, self.name, f.code, f.message,
                                   f"ethtool -a: {st.value()}; PFC priorities {pfc} ({source})"))
        return out
