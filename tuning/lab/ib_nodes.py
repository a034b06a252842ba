"""The IB lab's node sysroots: each node's ``/sys/class/infiniband/<hca>/ports/1/`` as its HCAs hold it in ibsim.

A real node's kernel answers a port's sysfs files from the HCA's own PortInfo, P_Key table and PMA
counters (``ib_query_port``, ``ib_query_pkey``, a PerfMgmt MAD: ``drivers/infiniband/core/sysfs.c``).
The lab asks the same of the simulated HCA: for each HCA, three real infiniband-diags queries attached
AT that HCA (``SIM_HOST=<node>-<hca>``) and addressed to itself by the direct route ``0``, so they need
no SM and answer for a port that is down:

- ``smpquery -D portinfo 0 1``: ``LinkState``, ``PhysLinkState``, ``Lid`` and ``SMLid`` (what OpenSM
  programmed), ``LinkWidthActive``, ``LinkSpeedActive`` / ``LinkSpeedExtActive``, ``LMC``, ``SMSL``,
  ``CapMask``, ``GidPrefix``;
- ``smpquery -D pkeys 0 1``: the P_Key table OpenSM programmed from ``partitions.conf``;
- ``perfquery``: the port's PortCounters (the error counters ibsim's console sets).

and writes them in the kernel's formats (:mod:`tuning.parsers.ib_sysfs`) under
``<lab>/nodes/<node>/sys/class/infiniband/<hca>/``: ``node_type`` ``1: CA``, ``node_guid`` and
``sys_image_guid`` (``%04x:%04x:%04x:%04x``), ``node_desc``, mlx5's ``fw_ver`` / ``hw_rev`` / ``hca_type``
(the lab's ConnectX-7: :data:`tuning.lab.hw_nic.FW_VERSION`, ``0`` (``"%x"`` of its revision), ``MT4129``), and ``ports/1/{state, phys_state, rate, lid, sm_lid,
lid_mask_count, sm_sl, cap_mask, link_layer, gids/0, pkeys/0..N-1, counters/<name>}``. ``link_layer`` is
``InfiniBand``. ibsim 0.10 tops out at HDR and 2048-byte MTUs; the rate is what its port runs.

The port's MTUs (PortInfo ``MtuCap`` and ``NeighborMTU``, which no sysfs file holds) go to the lab's
own files under ``<sysroot>/hw/ib/`` and the node gets ``bin/ibv_devinfo``, the lab's stand-in that prints
them with the tree (:mod:`tuning.lab.ib_devinfo`): a real node's ``ibv_devinfo`` asks its HCA.
"""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tuning.errors import TuningError
from tuning.lab.hw_nic import FW_VERSION
from tuning.lab.ib_devinfo import MTU_DIR, mtu_files, wrapper
from tuning.lab.ib_tools import run_tool
from tuning.lab.ib_topology import IbHca
from tuning.parsers.ib_counters import parse_perfquery
from tuning.parsers.ib_sm import parse_pkeys
from tuning.parsers.ib_sysfs import PHYS_STATES, STATES, rate_text

__all__ = ["COUNTER_FILES", "link_state", "node_sysroot", "port_files", "port_mtus", "refresh", "write_hca"]

#: perfquery's PortCounters field -> the kernel's ``counters/`` file (``PORT_PMA_ATTR`` in sysfs.c)
COUNTER_FILES = {
    "SymbolErrorCounter": "symbol_error", "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed", "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors", "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors", "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors", "VL15Dropped": "VL15_dropped",
    "PortXmitData": "port_xmit_data", "PortRcvData": "port_rcv_data", "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
}
#: smpquery's LinkState / PhysLinkState words (libibmad ``mad_dump_portstate`` / ``mad_dump_physportstate``)
_LINK_STATES = {"Down": 1, "Initialize": 2, "Armed": 3, "Active": 4}
_PHYS_STATES = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
                "LinkErrorRecovery": 6, "PhyTest": 7}
#: LinkSpeedExtActive / LinkSpeedActive as smpquery prints them -> the kernel's speed word
_SPEEDS = {"53.125 Gbps": "HDR", "25.78125 Gbps": "EDR", "14.0625 Gbps": "FDR", "106.25 Gbps": "NDR",
           "10.0 Gbps": "QDR", "5.0 Gbps": "DDR", "2.5 Gbps": "SDR"}
#: mlx5's ``hca_type`` (``"MT%d"`` of the PCI device id, ``hca_type_show``): a ConnectX-7 is 0x1021
HCA_TYPE = "MT4129"
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9]*):\.*(.*)$")
#: at most this many HCAs queried at once (ibsim serves 10 clients; OpenSM and a test's tool are two)
_WORKERS = 4


def node_sysroot(lab_dir: Path, node: str) -> Path:
    """The sysroot folder of lab node ``node``: ``<lab>/nodes/<node>`` (``lab_dir``: the IB lab's folder)."""
    return Path(lab_dir) / "nodes" / node


def _fields(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def link_state(portinfo: str) -> str | None:
    """``LinkState`` of a ``smpquery portinfo`` output (``Active``, ``Down``), None when absent."""
    return _fields(portinfo).get("LinkState")


def _word(table: dict[str, int], value: str, what: str) -> int:
    if value not in table:
        raise TuningError(f"smpquery printed {what} {value!r}; the lab knows {', '.join(table)}")
    return table[value]


def port_files(portinfo: str, pkeys: str, perfquery: str | None, port_guid: int) -> dict[str, str]:
    """The files of one port (relative to ``ports/1``) from the three queries' outputs (module docstring);
    ``perfquery`` None: no ``counters/``.

    Raises:
        TuningError / ParseError: an output the lab does not know (never a made-up value).
    """
    f = _fields(portinfo)
    state, phys = _word(_LINK_STATES, f["LinkState"], "LinkState"), _word(_PHYS_STATES, f["PhysLinkState"], "PhysLinkState")
    speed = _SPEEDS.get(f.get("LinkSpeedExtActive", "")) or _SPEEDS.get(f["LinkSpeedActive"])
    if speed is None:
        raise TuningError(f"smpquery printed LinkSpeedActive {f['LinkSpeedActive']!r}; the lab knows {', '.join(_SPEEDS)}")
    lanes = int(f["LinkWidthActive"].rstrip("X"))
    prefix, guid = int(f["GidPrefix"], 16), f"{port_guid:016x}"
    groups = [f"{prefix:016x}"[i:i + 4] for i in range(0, 16, 4)] + [guid[i:i + 4] for i in range(0, 16, 4)]
    files = {"state": f"{state}: {STATES[state]}", "phys_state": f"{phys}: {PHYS_STATES[phys]}",
             "rate": rate_text(lanes, speed), "lid": f"0x{int(f['Lid']):x}", "sm_lid": f"0x{int(f['SMLid']):x}",
             "lid_mask_count": str(int(f["LMC"])), "sm_sl": str(int(f["SMSL"])),
             "cap_mask": f"0x{int(f['CapMask'], 16):08x}", "link_layer": "InfiniBand", "gids/0": ":".join(groups)}
    table = parse_pkeys(pkeys)
    by_index = {e.index: int(e.raw, 16) for e in table.entries}
    files.update({f"pkeys/{i}": f"0x{by_index.get(i, 0):04x}" for i in range(table.capacity or 0)})
    counters = parse_perfquery(perfquery).blocks[0].counters if perfquery is not None else {}
    files.update({f"counters/{name}": str(counters[field]) for field, name in COUNTER_FILES.items() if field in counters})
    return files


def port_mtus(portinfo: str) -> dict[str, str]:
    """The lab's MTU files of one port from its ``smpquery portinfo``: ``max_mtu`` its ``MtuCap``,
    ``active_mtu`` its ``NeighborMTU`` (bytes). Raises KeyError / ValueError: a field absent or not an MTU."""
    f = _fields(portinfo)
    return mtu_files(int(f["MtuCap"]), int(f["NeighborMTU"]))


def write_hca(root: Path, hca: IbHca, files: dict[str, str], mtus: dict[str, str] | None = None) -> None:
    """Write one HCA's tree under sysroot ``root`` (its old port folder replaced as a whole); with ``mtus``
    (:func:`port_mtus`), its port's MTU files and the node's ``bin/ibv_devinfo`` too."""
    dev = root / "sys/class/infiniband" / hca.device
    g = f"{hca.node_guid:016x}"
    guid = ":".join(g[i:i + 4] for i in range(0, 16, 4))
    top = {"node_type": "1: CA", "node_guid": guid, "sys_image_guid": guid, "node_desc": hca.description,
           "fw_ver": FW_VERSION, "hw_rev": "0", "hca_type": HCA_TYPE}
    port = dev / "ports" / "1"
    if port.exists():
        shutil.rmtree(port)
    for rel, text in [*top.items(), *((f"ports/1/{k}", v) for k, v in files.items())]:
        path = dev / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    if mtus is not None:
        for name, text in mtus.items():
            path = root / MTU_DIR / hca.device / "ports" / "1" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n")
        tool = root / "bin" / "ibv_devinfo"
        tool.parent.mkdir(exist_ok=True)
        tool.write_text(wrapper(root))
        tool.chmod(0o755)


def _query(lab_dir: Path, hca: IbHca) -> tuple[dict[str, str], dict[str, str]]:
    """The three queries of ``hca`` (module docstring); no perfquery for a port without a LID: ibsim's PMA
    answers only LID-routed MADs, so such a port gets no ``counters/`` (a kernel asks its HCA's PMA locally)."""
    at = hca.node_id
    portinfo = run_tool(lab_dir, "smpquery", ["-D", "portinfo", "0", "1"], host=at)
    counters = run_tool(lab_dir, "perfquery", [], host=at) if _fields(portinfo).get("Lid", "0") != "0" else None
    return port_files(portinfo, run_tool(lab_dir, "smpquery", ["-D", "pkeys", "0", "1"], host=at), counters,
                      hca.port_guid), port_mtus(portinfo)


def refresh(lab_dir: Path, hcas: list[IbHca]) -> None:
    """Read ``hcas`` from the simulator (at most :data:`_WORKERS` at once) and rewrite their sysfs trees.

    Raises:
        CommandError: a query failed (ibsim gone, a node it does not know).
    """
    with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        answers = list(pool.map(lambda h: _query(Path(lab_dir), h), hcas))
    for hca, (files, mtus) in zip(hcas, answers):
        write_hca(node_sysroot(lab_dir, hca.node), hca, files, mtus)
