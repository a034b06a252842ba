"""The test labs of one pytest process: each starts once and is reset to power-on for every lease.

A lease hands a test (or a module fixture) a running lab of the fabric shape it asks for (its node
count), behind the test's own inventory folder: the inventory's ``hosts.yaml`` is pointed at the
lab's ports and ``INV/.state`` is a link to the lab's state folder. Before the lease the lab is put
back to power-on (:func:`tuning.lab.power_on.reset`: node files, switch revisions, injections, sudo
policy, lab processes), and the reset checks itself. A lab whose daemon a test stopped is started
again at the next lease. Two leases held at once get two labs.

Ports: every lab of the pool sits in this process's range (``tests.conftest.TEST_BASE_PORT``), lab
k at ``TEST_BASE_PORT + k * SLOT`` (nodes +1..+100, switches +101..+103).
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

#: ports one pooled lab takes (node k at +k for k <= 100, switches at +101..+103)
SLOT = 110
#: at most this many labs at once per pytest process (their ports must stay in its range)
MAX_LABS = 4


@dataclass
class PooledLab:
    """One running lab of the pool."""

    state: Path
    n_nodes: int
    base_port: int
    busy: bool = False
    #: switch -> its OS where not NVUE (``{"leaf02": "eos"}``): a lab of another shape
    switch_os: dict = field(default_factory=dict)


class LabPool:
    """The running labs of this process. ``starts`` counts the labs it started."""

    def __init__(self, root: Path, base_port: int) -> None:
        self.root, self.base_port = root, base_port
        self.labs: list[PooledLab] = []
        self.starts = 0

    def _start(self, lab: PooledLab) -> None:
        from tuning.lab import controller
        from tuning.lab.fabric import default_fabric

        controller.up(lab.state, default_fabric(base_port=lab.base_port, n_nodes=lab.n_nodes, switch_os=lab.switch_os))
        self.starts += 1

    def _take(self, n_nodes: int, switch_os: dict) -> PooledLab:
        from tuning.lab import controller, power_on

        for lab in self.labs:
            if not lab.busy and lab.n_nodes == n_nodes and lab.switch_os == switch_os:
                if controller.running_pid(lab.state) is None:
                    self._start(lab)  # a test stopped it: start it again (fresh, untuned)
                else:
                    power_on.reset(lab.state)
                lab.busy = True
                return lab
        free = sorted(set(range(MAX_LABS)) - {(lab.base_port - self.base_port) // SLOT for lab in self.labs})
        if not free:  # every slot holds a lab: stop an idle one of another shape
            idle = next((lab for lab in self.labs if not lab.busy), None)
            if idle is None:
                raise RuntimeError(f"more than {MAX_LABS} test labs held at once")
            controller.down(idle.state)
            self.labs.remove(idle)
            shutil.rmtree(idle.state.parent, ignore_errors=True)  # its node sysroots: ~28,000 inodes a node
            free = [(idle.base_port - self.base_port) // SLOT]
        shape = "".join(f"-{name}{os_}" for name, os_ in sorted(switch_os.items()))
        lab = PooledLab(self.root / f"lab{free[0]}-{n_nodes}n{shape}" / ".state", n_nodes,
                        self.base_port + free[0] * SLOT, switch_os=dict(switch_os))
        self._start(lab)
        self.labs.append(lab)
        lab.busy = True
        return lab

    @contextmanager
    def lease(self, inv: Path, n_nodes: int = 4, switch_os: dict | None = None) -> Iterator[Path]:
        """A power-on lab of ``n_nodes`` nodes (and ``switch_os``: switch -> OS where not NVUE)
        serving the inventory folder ``inv`` (its ``hosts.yaml`` is retargeted at the lab's ports;
        ``inv/.state`` links to the lab's state); yields ``inv`` and gives the lab back after."""
        from tuning.lab.fabric import default_fabric, retarget_inventory

        lab = self._take(n_nodes, switch_os or {})
        try:
            retarget_inventory(inv / "hosts.yaml", default_fabric(base_port=lab.base_port, n_nodes=n_nodes))
            link = inv / ".state"
            if link.is_symlink() or link.is_file():
                link.unlink()
            elif link.exists():
                shutil.rmtree(link)
            link.symlink_to(lab.state)
            yield inv
        finally:
            lab.busy = False
            if (inv / ".state").is_symlink():
                os.unlink(inv / ".state")

    def close(self) -> None:
        """Stop every lab of the pool."""
        from tuning.lab import controller

        for lab in self.labs:
            controller.down(lab.state)
        self.labs.clear()
