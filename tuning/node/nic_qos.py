"""RoCE QoS on ConnectX NICs: trust mode and PFC (``mlnx_qos``), ECN / DCQCN per priority,
CNP DSCP and priority, and the RDMA-CM ToS of RoCE traffic.

Sources: Mellanox/mlnx-tools ``mlnx_qos`` (always prints the full status table, read with
the ``mlnx_qos`` parser); NVIDIA MLNX_OFED "Explicit Congestion Notification (ECN)"
(``/sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio>``, ``roce_np/cnp_dscp``,
``roce_np/cnp_802p_prio``); the inbox mlx5 driver has no per-priority ECN enable and keeps
DCQCN knobs in debugfs ``/sys/kernel/debug/mlx5/<bdf>/cc_params`` (``np_cnp_dscp``,
``np_cnp_prio``; linux ``drivers/infiniband/hw/mlx5/cong.c``); ``cma_roce_tos -d <dev> -t <tos>``
sets ``default_roce_tos`` in configfs rdma_cm (ToS 106 = DSCP 26 with ECT(0)).

Example profile::

    nic_qos: {trust: dscp, pfc_priority: 3, ecn: true, roce_dscp: 26, cnp_dscp: 48, cnp_priority: 6}
"""

from __future__ import annotations

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, NodeFacts, decode
from tuning.parsers import ParseError, parse
from tuning.transport.base import q, sysroot_path

_ECN = "/sys/class/net/{nic}/ecn/{proto}/enable/{prio}"
_NP = "/sys/class/net/{nic}/ecn/roce_np/{param}"
_CC = "/sys/kernel/debug/mlx5/{bdf}/cc_params/{param}"


def _file_keys(spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
    """key -> device path of every file-backed QoS setting, by driver flavour."""
    out = {}
    p = spec.nic_qos.pfc_priority
    for nic in spec.nics:
        f = facts.nics.get(nic.netdev, {})
        if f.get("driver") == "ofed":
            for proto in ("roce_np", "roce_rp"):
                out[f"ecn/{nic.netdev}/{proto}/{p}"] = _ECN.format(nic=nic.netdev, proto=proto, prio=p)
            out[f"cnp_dscp/{nic.netdev}"] = _NP.format(nic=nic.netdev, param="cnp_dscp")
            out[f"cnp_prio/{nic.netdev}"] = _NP.format(nic=nic.netdev, param="cnp_802p_prio")
        elif f.get("bdf"):
            out[f"cc/{nic.netdev}/np_cnp_dscp"] = _CC.format(bdf=f["bdf"], param="np_cnp_dscp")
            out[f"cc/{nic.netdev}/np_cnp_prio"] = _CC.format(bdf=f["bdf"], param="np_cnp_prio")
    return out


class NicQosDomain(Domain):
    """Keys: ``trust/<if>``, ``pfc/<if>`` (8 comma-separated 0/1), ``tos/<rdma dev>``,
    ``ecn/<if>/<roce_np|roce_rp>/<prio>``, ``cnp_dscp/<if>``, ``cnp_prio/<if>`` (OFED) or
    ``cc/<if>/np_cnp_dscp|np_cnp_prio`` (inbox driver)."""

    name = "nic_qos"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        lines = []
        for nic in spec.nics:
            lines.append(f"bp mlnx_qos/{nic.netdev} mlnx_qos -i {q(nic.netdev)}")
            lines.append(f"bp tos/{nic.rdma_device} cma_roce_tos -d {q(nic.rdma_device)}")
        # ECN / CNP files: read both flavours' paths; the absent ones print ABSENT.
        p = spec.nic_qos.pfc_priority
        for nic in spec.nics:
            for proto in ("roce_np", "roce_rp"):
                lines.append(f"r ecn/{nic.netdev}/{proto}/{p} {q(sysroot_path(sysroot, _ECN.format(nic=nic.netdev, proto=proto, prio=p)))}")
            lines.append(f"r cnp_dscp/{nic.netdev} {q(sysroot_path(sysroot, _NP.format(nic=nic.netdev, param='cnp_dscp')))}")
            lines.append(f"r cnp_prio/{nic.netdev} {q(sysroot_path(sysroot, _NP.format(nic=nic.netdev, param='cnp_802p_prio')))}")
            cc = sysroot_path(sysroot, "/sys/kernel/debug/mlx5")
            for param in ("np_cnp_dscp", "np_cnp_prio"):
                lines.append(f"r cc/{nic.netdev}/{param} {q(cc)}/\"$(basename \"$(readlink -f "
                             f"{q(sysroot_path(sysroot, f'/sys/class/net/{nic.netdev}/device'))})\")\"/cc_params/{param}")
        return lines

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out = {}
        for nic in spec.nics:
            raw = decode(facts.raw.get(f"mlnx_qos/{nic.netdev}", ABSENT))
            try:
                st = parse("mlnx_qos", raw) if raw != ABSENT else None
            except ParseError:
                st = None
            out[f"trust/{nic.netdev}"] = st.trust if st else ABSENT
            out[f"pfc/{nic.netdev}"] = ",".join(str(int(b)) for b in st.pfc_enabled) if st else ABSENT
            tos = decode(facts.raw.get(f"tos/{nic.rdma_device}", ABSENT)).strip()
            out[f"tos/{nic.rdma_device}"] = tos.splitlines()[-1] if tos and tos != ABSENT else ABSENT
        for key in _file_keys(spec, facts):
            out[key] = facts.raw.get(key, ABSENT)
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        qos = spec.nic_qos
        pfc = ",".join("1" if i == qos.pfc_priority else "0" for i in range(8))
        out = {}
        for nic in spec.nics:
            out[f"trust/{nic.netdev}"] = qos.trust
            out[f"pfc/{nic.netdev}"] = pfc
            out[f"tos/{nic.rdma_device}"] = str(qos.roce_tos)
        for key in _file_keys(spec, facts):
            kind = key.split("/")[0]
            if kind == "ecn":
                out[key] = "1" if qos.ecn else "0"
            elif kind == "cnp_dscp" or key.endswith("np_cnp_dscp"):
                out[key] = str(qos.cnp_dscp)
            else:
                out[key] = str(qos.cnp_priority)
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        kind, rest = key.split("/", 1)
        if kind == "trust":
            return f"mlnx_qos -i {q(rest)} --trust {q(value)} >/dev/null"
        if kind == "pfc":
            return f"mlnx_qos -i {q(rest)} --pfc {q(value)} >/dev/null"
        if kind == "tos":
            return f"cma_roce_tos -d {q(rest)} -t {int(value)} >/dev/null"
        path = _file_keys(spec, facts)[key]
        return f"echo {q(value)} > {q(sysroot_path(sysroot, path))}"
