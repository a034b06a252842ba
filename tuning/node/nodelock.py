"""The node-side lock of fabtune's scripts: every apply and restore script (node domains, the
firmware reset) takes it first, so two of them never write one node at once."""

from __future__ import annotations

from tuning.transport.base import q, sysroot_path

#: the node-side lock every apply and restore script holds (``flock`` from util-linux) in a folder
#: only root may enter (``/run`` is root's; ``/run/lock`` is world-writable and a lock there could be
#: held by any user), so a rollback after a killed controller waits for the killed run's script
#: instead of racing it, and no unprivileged user can hold fabtune off
NODE_LOCK = "/run/fabtune/node.lock"
#: how long a script waits for that lock (s); exit 75 (EX_TEMPFAIL) when it stays held
NODE_LOCK_WAIT_S = 120
#: what a script prints on stderr when it could not take the lock
LOCK_MARK = "@@lock"


def prelude(sysroot: str) -> str:
    """Take :data:`NODE_LOCK` (under ``sysroot``) on fd 9 for the rest of the script, or exit 75."""
    path = q(sysroot_path(sysroot, NODE_LOCK))
    return (f'L={path}\n'
            f'if ! e=$({{ mkdir -p -m 0700 "${{L%/*}}" && : >>"$L"; }} 2>&1) || ! exec 9>>"$L"; then '
            f'echo "{LOCK_MARK} fabtune: cannot open the node lock $L (root only: does the inventory set '
            f'ansible_become?): ${{e##*: }}" >&2; exit 75; fi\n'
            f'flock -w {NODE_LOCK_WAIT_S} 9 || {{ echo "{LOCK_MARK} fabtune: another fabtune run holds $L '
            f'on this node (waited {NODE_LOCK_WAIT_S} s)" >&2; exit 75; }}\n')
