"""A lab node's shell run in this process's machine, without SSH or the lab daemon: the fast test
layer runs the real node domains through it (:class:`tuning.transport.local.LocalHost`)."""

from __future__ import annotations

from pathlib import Path

from tuning.lab.nodeserver import node_env
from tuning.transport.local import LocalHost


def lab_node(state_dir: Path, node: str) -> LocalHost:
    """``node``'s shell as the lab's SSH server runs a command: its folder as the working
    directory, the lab environment (:func:`tuning.lab.nodeserver.node_env`: ``<state>/bin`` first
    on ``PATH``) and its sysroot (``sysroot``, relative, as the lab inventory's
    ``fabtune_sysroot``). ``state_dir`` is laid out by :func:`tuning.lab.controller.prepare` (no
    daemon needed); privileged commands run as this process's user (root in CI)."""
    state_dir = Path(state_dir).resolve()
    return LocalHost(node, "sysroot", cwd=state_dir / "nodes" / node, env=node_env(state_dir, node))
