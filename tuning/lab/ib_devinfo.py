"""The IB lab's ``ibv_devinfo``: rdma-core's plain form (``libibverbs/examples/devinfo.c``
``print_hca_cap`` without ``-v``; the layout of ``shared/cases/ibv_devinfo__*.txt``) for a lab node's HCAs.

ibsim has no verbs, so a lab node has no ``ibv_devinfo`` of its own: this stand-in prints what the real
one prints for an HCA whose port is the simulated one. Everything but the MTUs comes from the node's sysfs
tree (:mod:`tuning.lab.ib_nodes`, written from ibsim's HCAs): ``node_guid``, ``sys_image_guid``,
``fw_ver``, ``hw_rev`` (``hw_ver 0x%X``), ``hca_type`` (``MT4129`` -> ``vendor_part_id 4129``; vendor
``0x02c9``, Mellanox's, as the mlx5 driver's), each port's ``state`` (``PORT_ACTIVE (4)``), ``sm_lid``,
``lid``, ``lid_mask_count`` and ``link_layer``. The MTUs are in no sysfs file (a kernel asks the HCA):
the lab keeps them where no real tool looks, ``<sysroot>/hw/ib/<hca>/ports/<p>/{max_mtu,active_mtu}``
(bytes), written with the tree from the HCA's PortInfo: ``max_mtu`` its ``MtuCap``, ``active_mtu`` its
``NeighborMTU`` (what OpenSM negotiated with the switch port; ibsim's ports cap at 2048). ``board_id``
is printed only when the tree has the file, as devinfo.c does (the lab writes none).

Only the plain form is served: an argument (``-v``, ``-d``) is refused by the lab, never answered
with a made-up verbose output.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["MTU_DIR", "devinfo_text", "main", "mtu_files", "wrapper"]

#: the lab's MTU files of a port, relative to the sysroot (module docstring)
MTU_DIR = "hw/ib"
#: IBA MTU code of each size (devinfo.c ``mtu_str`` prints ``4096 (5)``)
_MTU_CODES = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
#: sysfs ``state`` number -> devinfo.c ``port_state_str``
_PORT_STATES = {0: "PORT_NOP", 1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED", 4: "PORT_ACTIVE",
                5: "PORT_ACTIVE_DEFER"}
_MELLANOX = 0x02C9


def mtu_files(max_mtu: int, active_mtu: int) -> dict[str, str]:
    """The lab's MTU files of one port (relative to its folder under :data:`MTU_DIR`), in bytes.

    Raises:
        ValueError: a size that is not an IBA MTU (256 .. 4096).
    """
    for v in (max_mtu, active_mtu):
        if v not in _MTU_CODES:
            raise ValueError(f"MTU {v} is not an InfiniBand MTU; allowed: {', '.join(map(str, _MTU_CODES))}")
    return {"max_mtu": str(max_mtu), "active_mtu": str(active_mtu)}


def _read(path: Path) -> str:
    return path.read_text().strip()


def _mtu(size: str) -> str:
    return f"{int(size)} ({_MTU_CODES[int(size)]})"


def _port(root: Path, hca: str, port: Path) -> list[str]:
    mtus = root / MTU_DIR / hca / "ports" / port.name
    state = int(_read(port / "state").split(":")[0])
    return [f"\t\tport:\t{port.name}", f"\t\t\tstate:\t\t\t{_PORT_STATES[state]} ({state})",
            f"\t\t\tmax_mtu:\t\t{_mtu(_read(mtus / 'max_mtu'))}", f"\t\t\tactive_mtu:\t\t{_mtu(_read(mtus / 'active_mtu'))}",
            f"\t\t\tsm_lid:\t\t\t{int(_read(port / 'sm_lid'), 16)}", f"\t\t\tport_lid:\t\t{int(_read(port / 'lid'), 16)}",
            f"\t\t\tport_lmc:\t\t0x{int(_read(port / 'lid_mask_count')):02x}",
            f"\t\t\tlink_layer:\t\t{_read(port / 'link_layer')}", ""]


def _device(root: Path, dev: Path) -> list[str]:
    ports = sorted((p for p in (dev / "ports").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    lines = [f"hca_id:\t{dev.name}", "\ttransport:\t\t\tInfiniBand (0)", f"\tfw_ver:\t\t\t\t{_read(dev / 'fw_ver')}",
             f"\tnode_guid:\t\t\t{_read(dev / 'node_guid')}", f"\tsys_image_guid:\t\t\t{_read(dev / 'sys_image_guid')}",
             f"\tvendor_id:\t\t\t0x{_MELLANOX:04x}", f"\tvendor_part_id:\t\t\t{int(_read(dev / 'hca_type')[2:])}",
             f"\thw_ver:\t\t\t\t0x{int(_read(dev / 'hw_rev'), 16):X}"]
    if (dev / "board_id").is_file():
        lines.append(f"\tboard_id:\t\t\t{_read(dev / 'board_id')}")
    lines.append(f"\tphys_port_cnt:\t\t\t{len(ports)}")
    return lines + [x for p in ports for x in _port(root, dev.name, p)]


def devinfo_text(sysroot: Path) -> str:
    """What ``ibv_devinfo`` prints for the HCAs under ``sysroot`` (module docstring), devices in name order.

    Raises:
        OSError / ValueError / KeyError: the tree lacks a file or holds a value the lab never writes.
    """
    root = Path(sysroot)
    devs = sorted(p for p in (root / "sys/class/infiniband").iterdir() if (p / "ports").is_dir())
    return "".join(line + "\n" for d in devs for line in _device(root, d))


def wrapper(sysroot: Path) -> str:
    """The ``bin/ibv_devinfo`` script of the lab node whose sysroot is ``sysroot``: this Python, this module."""
    return (f"#!{sys.executable}\n# fabtune IB lab (tuning/lab/ib_devinfo.py): ibv_devinfo of this lab node\n"
            f"import sys\nfrom tuning.lab.ib_devinfo import main\nsys.exit(main({str(Path(sysroot).resolve())!r}, sys.argv[1:]))\n")


def main(sysroot: str, argv: list[str]) -> int:
    """Print :func:`devinfo_text`; exit 0. An argument, or a node without HCAs, is the lab's refusal (exit 1)."""
    if argv:
        print(f"ibv_devinfo (fabtune IB lab): only the plain form is served, not {' '.join(argv)!r}", file=sys.stderr)
        return 1
    try:
        text = devinfo_text(Path(sysroot))
    except (OSError, ValueError, KeyError) as e:
        print(f"ibv_devinfo (fabtune IB lab): cannot read the node's HCAs: {e}", file=sys.stderr)
        return 1
    if not text:
        print("ibv_devinfo (fabtune IB lab): no HCA in this node's sysroot", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0
