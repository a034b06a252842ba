"""The engine's use of switch drivers: open, read state, per-setting plan, commit-confirm,
confirm, restore. Settings are flat keys so switch and node plans read alike:
``port/<swp>/mtu``, ``roce/enabled``, ``roce/mode``, ``roce/pfc_priority``, ``roce/trust``,
``roce/ecn_tcs``, ``roce/ecn_min_bytes``, ``roce/ecn_max_bytes``, ``roce/dscp/<dscp>``.

Apply stages the whole rendered ``nv set`` document and lets the switch compute the diff
(``nv config diff``), so an already-tuned switch gets no commit at all.
"""

from __future__ import annotations

from tuning.inventory import Device
from tuning.model.settings import expand_ports
from tuning.node.base import Change
from tuning.render import render_switch
from tuning.switch import DRIVERS
from tuning.switch.base import SwitchDriver, SwitchState


def open_driver(dev: Device) -> SwitchDriver:
    """Open the driver of ``dev.spec.platform`` (host keys checked). Raises ConnectError."""
    c = dev.connection
    drv = DRIVERS[dev.spec.platform](c.hostname, port=c.port, username=c.username, key_file=c.key_file,
                                     known_hosts=c.known_hosts, name=dev.name)
    drv.open()
    return drv


def desired(dev: Device) -> dict[str, str]:
    """The flat settings the inventory asks of one switch."""
    spec = dev.spec
    out = {f"port/{p}/mtu": str(spec.port_mtu_overrides.get(p, spec.port_mtu)) for p in expand_ports(spec.ports)}
    if spec.roce:
        r = spec.roce
        out.update({"roce/enabled": "true", "roce/mode": r.mode, "roce/pfc_priority": str(r.pfc_priority),
                    "roce/trust": r.trust, "roce/ecn_tcs": str(r.lossless_tc),
                    "roce/ecn_min_bytes": str(r.ecn_min_bytes), "roce/ecn_max_bytes": str(r.ecn_max_bytes)})
        out.update({f"roce/dscp/{d}": str(p) for d, p in r.dscp_to_switch_priority.items()})
    return out


def current(state: SwitchState, keys: dict[str, str]) -> dict[str, str | None]:
    """The same flat keys read from a switch's state (None where the switch has no value)."""
    r = state.roce
    vals: dict[str, str | None] = {
        "roce/enabled": "true" if r.enabled else "false",
        "roce/mode": r.mode if r.enabled else None,
        "roce/pfc_priority": None if r.pfc_priority is None else str(r.pfc_priority),
        "roce/trust": r.trust,
        "roce/ecn_tcs": ",".join(str(t) for t in sorted(r.ecn_tcs)) or None,
        "roce/ecn_min_bytes": None if r.ecn_min_bytes is None else str(r.ecn_min_bytes),
        "roce/ecn_max_bytes": None if r.ecn_max_bytes is None else str(r.ecn_max_bytes),
    }
    out = {}
    for key in keys:
        if key.startswith("port/"):
            mtu = state.ports.get(key.split("/")[1])
            out[key] = None if mtu is None else str(mtu)
        elif key.startswith("roce/dscp/"):
            p = r.dscp_to_switch_priority.get(int(key.split("/")[2]))
            out[key] = None if p is None else str(p)
        else:
            out[key] = vals.get(key)
    return out


def _same(key: str, have: str | None, want: str) -> bool:
    if have is None:
        return False
    if key == "roce/trust":  # NVUE trusts "pcp,dscp" under RoCE: dscp is honoured
        return want in have.split(",")
    if key == "roce/ecn_tcs":
        return want in have.split(",")
    if key in ("roce/ecn_min_bytes", "roce/ecn_max_bytes"):
        # NVUE shows thresholds rounded in KB/MB (150000 B reads back as 146.48 KB = 149996 B)
        return abs(int(have) - int(want)) <= max(16, int(want) // 500)
    return have == want


def collect(drv: SwitchDriver, dev: Device) -> SwitchState:
    """Read the switch's applied state (ports, RoCE, revision)."""
    return drv.get_state()


def plan(dev: Device, state: SwitchState) -> list[Change]:
    """Pure per-setting diff of desired vs the switch's applied state."""
    want = desired(dev)
    have = current(state, want)
    return [Change(dev.name, "switch", k, have[k], v) for k, v in want.items() if not _same(k, have[k], v)]


def revision(state: SwitchState) -> str:
    """The applied revision id, recorded as the snapshot before any commit."""
    return state.revision


def apply(drv: SwitchDriver, dev: Device, changes: list[Change], confirm_s: int | None,
          revision_before: str) -> str | None:
    """Stage the rendered config, commit (with a confirm window when ``confirm_s``).

    The driver's commit compares on the box itself and returns the applied revision unchanged
    when there is nothing to commit; that is how "nothing to change" is told here.

    Returns:
        The committed revision id, or None when the switch found nothing to change.
    """
    if not changes:
        return None
    drv.load_candidate(render_switch(dev))
    rev = drv.commit(confirm_within_s=confirm_s, message="fabtune")
    if rev == revision_before:
        drv.discard()
        return None
    return rev


def confirm(drv: SwitchDriver) -> None:
    """Keep a commit-confirm revision (after verification passed)."""
    if drv.has_pending_commit():
        drv.confirm()


def restore(drv: SwitchDriver, dev: Device, rec: dict) -> None:
    """Back to the revision applied before the run: reject a pending confirm (the switch reverts
    itself), else re-apply ``revision_before`` if the applied revision moved since. Re-applying a
    revision restores the whole switch config as it was then."""
    if drv.has_pending_commit():
        drv.rollback()
        return
    drv.discard()  # a push cut short may have left staged `nv set` lines behind
    before = rec.get("revision_before")
    if before and drv.current_revision() != str(before):
        drv.rollback_to(str(before))
