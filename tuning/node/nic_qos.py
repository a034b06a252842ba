"""RoCE QoS on ConnectX NICs: trust mode and PFC (``mlnx_qos``), ECN / DCQCN per priority,
CNP DSCP and priority, and the RDMA-CM ToS of RoCE traffic.

Sources: Mellanox/mlnx-tools ``mlnx_qos`` (always prints the full status table, read with
the ``mlnx_qos`` parser); NVIDIA MLNX_OFED "Explicit Congestion Notification (ECN)"
(``/sys/class/net/<if>/ecn/roce_np|roce_rp/enable/<prio>``, ``roce_np/cnp_dscp``,
``roce_np/cnp_802p_prio``); the inbox mlx5 driver has no per-priority ECN enable and keeps
DCQCN knobs in debugfs ``/sys/kernel/debug/mlx5/<bdf>/cc_params`` (``np_cnp_dscp``,
``np_cnp_prio``; linux ``drivers/infiniband/hw/mlx5/cong.c``); ``cma_roce_tos -d <dev> -t <tos>``
sets ``default_roce_tos`` in configfs rdma_cm (ToS 106 = DSCP 26 with ECT(0)).
The NIC's DSCP-to-priority map is owned for the RoCE and CNP DSCPs (``mlnx_qos -i IF
--dscp2prio set,DSCP,PRIO``, as NVIDIA's RoCE scripts set it; read back from the
``dscp2prio mapping:`` rows). The DCBX owner (``DCBX mode: OS controlled`` / ``Firmware
controlled``) is set with ``mlnx_qos -i IF --dcbx os|fw`` before trust and PFC: under a
firmware (switch-driven) DCBX agent, PFC written by the OS is put back.

Example profile::

    nic_qos: {trust: dscp, pfc_priority: 3, ecn: true, roce_dscp: 26, cnp_dscp: 48, cnp_priority: 6, dcbx: os}
"""

from __future__ import annotations

from functools import lru_cache

from tuning.errors import ParseError
from tuning.model import NodeSpec
from tuning.model.tags import lossless_tags
from tuning.node.base import ABSENT, Change, Domain, Finding, NodeFacts, Unfit, cat_cmd, decode, write_file_cmd
from tuning.parsers import parse
from tuning.transport.base import q, sysroot_path

_ECN = "/sys/class/net/{nic}/ecn/{proto}/enable/{prio}"
_NP = "/sys/class/net/{nic}/ecn/roce_np/{param}"
_CC = "/sys/kernel/debug/mlx5/{bdf}/cc_params/{param}"
#: keys set and read with mlnx_qos, in apply order (the DCBX owner first)
_QOS_KINDS = ("dcbx", "trust", "pfc", "dscp2prio")


def _file_keys(spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
    """key -> device path of every file-backed QoS setting, by driver flavour."""
    out: dict[str, str] = {}
    if spec.nic_qos is None:
        return out
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


def _qos_values(st) -> dict[str, str]:
    """``kind[/dscp] -> value`` of one parsed ``mlnx_qos`` status (dscp2prio only under trust dscp)."""
    out = {"dcbx": st.dcbx_mode or ABSENT, "trust": st.trust or ABSENT,
           "pfc": ",".join(str(int(b)) for b in st.pfc_enabled)}
    for dscp, prio in st.dscp2prio.items():
        out[f"dscp2prio/{dscp}"] = str(prio)
    return out


def _parse_qos(netdev: str, raw: str) -> dict[str, str]:
    """Parse ``mlnx_qos -i IF`` output. Raises ParseError (naming the NIC) on garbage or a failure text."""
    st = parse("mlnx_qos", raw)
    if getattr(st, "failure", None):
        raise ParseError("mlnx_qos", 0, f"a status table for {netdev}", str(st.failure))
    return _qos_values(st)


class NicQosDomain(Domain):
    """Keys: ``dcbx/<if>`` (os|fw), ``trust/<if>``, ``pfc/<if>`` (8 comma-separated 0/1),
    ``dscp2prio/<if>/<dscp>`` (priority of the RoCE and CNP DSCPs, trust dscp only),
    ``tos/<rdma dev>``, ``ecn/<if>/<roce_np|roce_rp>/<prio>``, ``cnp_dscp/<if>``, ``cnp_prio/<if>``
    (OFED) or ``cc/<if>/np_cnp_dscp|np_cnp_prio`` (inbox driver)."""

    name = "nic_qos"
    boot_script = True

    def tags(self, key: str, before: str | None, after: str | None) -> tuple[str, ...]:
        """``lossless_on`` / ``lossless_off`` when a PFC priority (``pfc/<if>``: a priority's 1
        added or removed) or an ECN flag (``ecn/...``: 1 enabled) flips."""
        b, a = str(before or ""), str(after or "")
        if key.startswith("pfc/"):
            on_b = {i for i, x in enumerate(b.split(",")) if x.strip() == "1"}
            on_a = {i for i, x in enumerate(a.split(",")) if x.strip() == "1"}
            return ("lossless_on",) if on_a - on_b else ("lossless_off",) if on_b - on_a else ()
        if key.startswith("ecn/"):
            return lossless_tags(b == "1", a == "1")
        return ()

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        lines = []
        for nic in spec.nics:
            lines.append(f"bp {q('mlnx_qos/' + nic.netdev)} mlnx_qos -i {q(nic.netdev)}")
            lines.append(f"bp {q('tos/' + nic.rdma_device)} cma_roce_tos -d {q(nic.rdma_device)}")
        if spec.nic_qos is None:  # unmanaged: mlnx_qos is still read (the pause domain's PFC)
            return lines
        # ECN / CNP files: read both flavours' paths; the absent ones print ABSENT.
        p = spec.nic_qos.pfc_priority
        for nic in spec.nics:
            for proto in ("roce_np", "roce_rp"):
                path = _ECN.format(nic=nic.netdev, proto=proto, prio=p)
                lines.append(f"r {q(f'ecn/{nic.netdev}/{proto}/{p}')} {q(sysroot_path(sysroot, path))}")
            for kind, param in (("cnp_dscp", "cnp_dscp"), ("cnp_prio", "cnp_802p_prio")):
                path = _NP.format(nic=nic.netdev, param=param)
                lines.append(f"r {q(kind + '/' + nic.netdev)} {q(sysroot_path(sysroot, path))}")
            cc = sysroot_path(sysroot, "/sys/kernel/debug/mlx5")
            dev = sysroot_path(sysroot, f"/sys/class/net/{nic.netdev}/device")
            for param in ("np_cnp_dscp", "np_cnp_prio"):
                lines.append(f"r {q(f'cc/{nic.netdev}/{param}')} {q(cc)}/\"$(basename \"$(readlink -f "
                             f"{q(dev)})\")\"/cc_params/{param}")
        return lines

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """``ecn-unsupported``: on the inbox mlx5 driver ECN cannot be turned on per priority (no
        ``ecn/roce_np|roce_rp/enable/<prio>`` files: upstream ``cong.c`` keeps DCQCN in debugfs
        ``cc_params``, where only the CNP DSCP and priority are set); ``nic_qos.ecn`` is not applied there."""
        inbox = [nic.netdev for nic in spec.nics
                 if facts.nics.get(nic.netdev, {}).get("bdf") and facts.nics[nic.netdev].get("driver") != "ofed"]
        out = []
        if spec.nic_qos is not None and spec.nic_qos.ecn and inbox:
            out.append(Finding(device, self.name, "ecn-unsupported",
                               f"inbox mlx5 driver on {len(inbox)} NIC(s): no per-priority ECN enable, so nic_qos.ecn "
                               "is not applied (DCQCN runs with the firmware defaults; the CNP DSCP and priority are "
                               "set in debugfs cc_params)",
                               "no ecn/ folder under /sys/class/net/ of " + ", ".join(inbox)))
        return out

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out: dict[str, str] = {}
        if spec.nic_qos is None:  # unmanaged (the inventory sets no nic_qos): nothing to snapshot
            return out
        for nic in spec.nics:
            raw = decode(facts.raw.get(f"mlnx_qos/{nic.netdev}", ABSENT))
            values = _parse_qos(nic.netdev, raw) if raw != ABSENT else {}
            for kind in ("dcbx", "trust", "pfc"):
                out[f"{kind}/{nic.netdev}"] = values.get(kind, ABSENT)
            for dscp in _map_dscps(spec):
                out[f"dscp2prio/{nic.netdev}/{dscp}"] = values.get(f"dscp2prio/{dscp}", ABSENT)
            tos = decode(facts.raw.get(f"tos/{nic.rdma_device}", ABSENT)).strip()
            out[f"tos/{nic.rdma_device}"] = tos.splitlines()[-1] if tos and tos != ABSENT else ABSENT
        for key in _file_keys(spec, facts):
            out[key] = facts.raw.get(key, ABSENT)
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        qos = spec.nic_qos
        if qos is None:  # unmanaged: the NIC's QoS is left as it is
            return {}
        pfc = ",".join("1" if i == qos.pfc_priority else "0" for i in range(8))
        out, dscps = {}, _map_dscps(spec)
        for i, nic in enumerate(spec.nics):
            if facts.raw and facts.raw.get(f"mlnx_qos/{nic.netdev}", "?") == ABSENT:
                raise Unfit(f"nics.{i}.netdev", f"`mlnx_qos -i {nic.netdev}` failed on this node: its QoS cannot "
                                               "be read, so it cannot be snapshotted or restored")
            out[f"dcbx/{nic.netdev}"] = qos.dcbx
            out[f"trust/{nic.netdev}"] = qos.trust
            out[f"pfc/{nic.netdev}"] = pfc
            for dscp, prio in dscps.items():
                out[f"dscp2prio/{nic.netdev}/{dscp}"] = str(prio)
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

    def plan(self, device: str, desired: dict[str, str], current: dict[str, str],
             ctx: tuple[NodeSpec, NodeFacts, str] | None = None) -> list[Change]:
        """The base diff; a DSCP map entry unknown before (trust was pcp, so mlnx_qos did not print
        the map) is restored with ``--dscp2prio del,DSCP,PRIO``, the tool's own undo."""
        out = []
        for ch in super().plan(device, desired, current, ctx):
            if ch.key.startswith("dscp2prio/") and ch.before is None and ctx is not None:
                _, netdev, dscp = ch.key.split("/")
                ch = Change(**{**ch.as_dict(), "restore_cmd": _qos_cmd(netdev, "--dscp2prio", f"del,{dscp},{ch.after}")})
            out.append(ch)
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if value == ABSENT:
            return None  # nothing to write back for a setting that had no value
        kind, rest = key.split("/", 1)
        if kind in ("dcbx", "trust", "pfc"):
            return _qos_cmd(rest, f"--{kind}", value)
        if kind == "dscp2prio":
            netdev, dscp = rest.split("/")
            return _qos_cmd(netdev, "--dscp2prio", f"set,{dscp},{value}")
        if kind == "tos":
            return _tos_cmd(rest, value)
        return write_file_cmd(sysroot, _file_keys(spec, facts)[key], value)

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        kind, rest = key.split("/", 1)
        if kind in _QOS_KINDS:
            return f"mlnx_qos -i {q(rest.split('/')[0])}"
        if kind == "tos":
            return f"cma_roce_tos -d {q(rest)}"
        return cat_cmd(sysroot, _file_keys(spec, facts)[key])

    def parse_read(self, key: str, output: str) -> str:
        kind, rest = key.split("/", 1)
        if kind in _QOS_KINDS:
            netdev, _, dscp = rest.partition("/")
            values = _parse_qos(netdev, output)
            return values.get(f"dscp2prio/{dscp}" if dscp else kind, ABSENT)
        if kind == "tos":
            lines = output.strip().splitlines()
            return lines[-1] if lines else ""
        return super().parse_read(key, output)


def _map_dscps(spec: NodeSpec) -> dict[int, int]:
    """DSCP -> priority the NIC must map (trust dscp only): RoCE DSCP -> PFC priority, CNP DSCP -> CNP priority."""
    qos = spec.nic_qos
    if qos.trust != "dscp":
        return {}
    return {qos.roce_dscp: qos.pfc_priority, qos.cnp_dscp: qos.cnp_priority}


@lru_cache(maxsize=4096)
def _qos_cmd(netdev: str, option: str, value: str) -> str:
    """``mlnx_qos -i IF --OPTION VALUE >/dev/null`` (the tool prints the whole status table).
    Remembered by its words: a fleet of 10,000 nodes asks for the same few hundred lines 400,000 times."""
    return f"mlnx_qos -i {q(netdev)} {option} {q(value)} >/dev/null"


@lru_cache(maxsize=4096)
def _tos_cmd(rdma_device: str, tos: str) -> str:
    """``cma_roce_tos -d DEV -t TOS >/dev/null``, remembered as :func:`_qos_cmd`."""
    return f"cma_roce_tos -d {q(rdma_device)} -t {q(tos)} >/dev/null"
