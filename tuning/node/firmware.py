"""NIC firmware and non-volatile configuration of ConnectX NICs: ``mlxconfig`` parameters and the
firmware version (``mlxfwmanager``), both active only after a reset.

A value ``mlxconfig -y -d BDF set P=V`` writes goes to the NIC's flash as "Next Boot"; the NIC runs
it ("Current") after the next reboot or an ``mlxfwreset``. So:

- a key's value is its **Next Boot** value (what a set writes and what the read-back sees);
- a change whose Current is not the wanted value has ``effect = "pending_reset"``;
- a parameter whose Next Boot already holds the wanted value is **no change** (the tool's own
  ``-I- Please reboot machine`` line, printed after every set, plays no part); if its Current still
  differs it is reported by :func:`pending_resets` and :meth:`FirmwareDomain.findings`
  (``pending-reset``), never written again;
- with ``firmware.allow_reset`` the apply runs ``mlxfwreset -d BDF reset -y`` at most once per NIC
  it left pending (:func:`reset_pending`) and reads Current back: a parameter still not active is a
  VerifyError naming it, and fabtune never resets again for it (the next plan has no change for it);
- changes are irreversible (``Domain.reversible = False``): an automatic rollback keeps them
  (``fabtune rollback --firmware`` writes the old Next Boot values back).

Firmware version (``fw/<bdf>``): ``mlxfwmanager --query -d BDF`` (the version in flash); a burn only
when ``firmware.version`` is set and differs: ``mlxfwmanager -u -f -y -d BDF -D IMAGE_DIR`` (MFT
``mlxfwmanager`` options: ``-u`` update, ``-f`` force, so a pinned older version is burned too, ``-y``
no prompt, ``-D`` the folder holding the image for the NIC's PSID). The new version runs after a reset:
``pending_reset`` until sysfs ``/sys/class/infiniband/<dev>/fw_ver`` (the running version) shows it.
A burn cannot be undone from the journal (the old image is not at hand): its ``restore_cmd`` is None.
The engine refuses to push ``fw/`` keys (:data:`FW_KEY_PREFIX`) without ``--allow-firmware``.

Dual-port cards: one NV configuration per card (a set on function .0 shows on .1, as a recorded
ConnectX-7 transcript shows), so each card is addressed once, by its lowest PCI function.

Example profile::

    firmware:
      mlxconfig: {ADVANCED_PCI_SETTINGS: "True", MAX_ACC_OUT_READ: 44, PCI_WR_ORDERING: force_relax}
      version: "28.42.1000"
      image_dir: /opt/mlnx-fw
      allow_reset: true
"""

from __future__ import annotations

import base64
from functools import lru_cache
from typing import cast

from tuning.errors import CommandError, VerifyError
from tuning.model import NodeSpec
from tuning.node import nodelock
from tuning.node.base import ABSENT, Change, Domain, Finding, NodeFacts, Unfit, decode
from tuning.parsers import parse
from tuning.parsers.mlxtools import MlxParam, Mlxconfig, Mlxfwmanager, mlx_input, mlx_same, mlx_value
from tuning.transport.base import Host, q, sysroot_path

#: key prefix of firmware burns (the engine pushes them only with ``--allow-firmware``)
FW_KEY_PREFIX = "fw/"
#: key prefix of mlxconfig parameters: ``mlxconfig/<bdf>/<PARAM>``
MLX_KEY_PREFIX = "mlxconfig/"
#: seconds one ``mlxfwreset`` may take on a real NIC (driver stop, PCI reset, driver start)
RESET_TIMEOUT_S = 180.0


def _active(spec: NodeSpec) -> bool:
    return bool(spec.firmware.mlxconfig or spec.firmware.version)


def _cards(facts: NodeFacts) -> list[tuple[str, str]]:
    """``[(netdev, bdf)]``, one per card (its lowest PCI function), in inventory order."""
    seen: dict[str, tuple[str, str]] = {}
    for netdev, nic in facts.nics.items():
        bdf = nic.get("bdf", "")
        if bdf:
            card = bdf.rsplit(".", 1)[0]
            if card not in seen or bdf < seen[card][1]:
                seen[card] = (netdev, bdf)
    return list(seen.values())


@lru_cache(maxsize=64)
def _parse_query(text: str) -> Mlxconfig:
    return cast(Mlxconfig, parse("mlxconfig", text))


def _params(facts: NodeFacts, netdev: str) -> dict[str, MlxParam] | None:
    """The parameters of ``mlxconfig -d BDF -e q`` as read for ``netdev`` (None: the query failed)."""
    raw = facts.raw.get(f"mlxq/{netdev}", ABSENT)
    if raw == ABSENT:
        return None
    result = _parse_query(decode(raw))
    return result.devices[0].params if result.devices and result.failure is None else None


def _fw_flash(facts: NodeFacts, netdev: str) -> str | None:
    """The FW version ``mlxfwmanager --query`` printed for ``netdev`` (the flashed one), None if unread."""
    raw = facts.raw.get(f"fwq/{netdev}", ABSENT)
    if raw == ABSENT:
        return None
    return _fw_version(decode(raw))


def _fw_version(text: str) -> str | None:
    """The FW (current) version of the first device of an ``mlxfwmanager --query`` output."""
    result = cast(Mlxfwmanager, parse("mlxfwmanager", text))
    return result.devices[0].versions.get("FW", (None, None))[0] if result.devices else None


def _split(key: str) -> tuple[str, str, str]:
    """``mlxconfig/<bdf>/<PARAM>`` -> (``mlxconfig``, bdf, PARAM); ``fw/<bdf>`` -> (``fw``, bdf, "")."""
    kind, _, rest = key.partition("/")
    bdf, _, name = rest.partition("/")
    return kind, bdf, name


class FirmwareDomain(Domain):
    """``mlxconfig/<bdf>/<PARAM>`` -> its Next Boot value (printed form, ``True(1)``); ``fw/<bdf>`` ->
    the firmware version in flash. See the module docstring."""

    name = "firmware"
    reversible = False

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        if not _active(spec):
            return []
        lines = []
        for nic in spec.nics:
            dev = sysroot_path(sysroot, f"/sys/class/net/{nic.netdev}/device")
            lines.append(f'fwb=$(basename "$(readlink -f {q(dev)})" 2>/dev/null)')
            lines.append(f'bp {q("mlxq/" + nic.netdev)} mlxconfig -d "$fwb" -e q')
            if spec.firmware.version:
                lines.append(f'bp {q("fwq/" + nic.netdev)} mlxfwmanager --query -d "$fwb"')
            lines.append(f'for f in {q(dev)}/infiniband/*/fw_ver; do r {q("fwrun/" + nic.netdev)} "$f"; break; done')
        return lines

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out: dict[str, str] = {}
        if not _active(spec):
            return out
        for netdev, bdf in _cards(facts):
            params = _params(facts, netdev) or {}
            for name in spec.firmware.mlxconfig:
                p = params.get(name)
                out[f"{MLX_KEY_PREFIX}{bdf}/{name}"] = p.next_boot if p and p.next_boot is not None else ABSENT
            if spec.firmware.version:
                out[f"{FW_KEY_PREFIX}{bdf}"] = _fw_flash(facts, netdev) or ABSENT
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        """Raises Unfit: a parameter the NIC's ``mlxconfig -e q`` does not list (or lists read-only), a
        word wanted for a parameter mlxconfig prints as a number, a NIC whose query failed, a version
        without ``image_dir``. (A bad name for an enum parameter is refused by mlxconfig itself:
        ``-E- Unknown value X``, exit 3, before it writes anything.)"""
        fw = spec.firmware
        out: dict[str, str] = {}
        cards = [c for c in _cards(facts) if f"mlxq/{c[0]}" in facts.raw]  # the domain was collected
        for netdev, bdf in cards if _active(spec) else []:
            if fw.mlxconfig:
                out.update(self._wanted_params(spec, facts, netdev, bdf))
            if fw.version:
                if fw.image_dir is None:
                    raise Unfit("firmware.image_dir", f"firmware.version {fw.version} needs the folder of its image "
                                "on the node (mlxfwmanager -D), e.g. image_dir: /opt/mlnx-fw")
                if _fw_flash(facts, netdev) is None:
                    raise Unfit("firmware.version",
                                f"mlxfwmanager --query -d {bdf} ({netdev}) failed: is MFT installed?")
                out[f"{FW_KEY_PREFIX}{bdf}"] = fw.version
        return out

    def _wanted_params(self, spec: NodeSpec, facts: NodeFacts, netdev: str, bdf: str) -> dict[str, str]:
        params = _params(facts, netdev)
        if params is None:
            raise Unfit("firmware.mlxconfig", f"`mlxconfig -d {bdf} -e q` failed on {netdev}: is MFT (or mstflint) "
                        "installed and the NIC's firmware responding?")
        out = {}
        for name, value in spec.firmware.mlxconfig.items():
            want, p = str(value), params.get(name)
            if p is None:
                raise Unfit(f"firmware.mlxconfig.{name}", f"NIC {bdf} ({netdev}) has no mlxconfig parameter {name} "
                            f"(its `mlxconfig -e q` lists {len(params)}, e.g. {', '.join(list(params)[:6])})")
            if p.read_only:
                raise Unfit(f"firmware.mlxconfig.{name}", f"{name} is read-only (RO) on NIC {bdf} ({netdev})")
            printed = mlx_value(p.next_boot or "")
            if printed[0] is None and mlx_value(want)[1] is None:
                raise Unfit(f"firmware.mlxconfig.{name}", f"{name} takes a number on NIC {bdf} (prints "
                            f"{p.next_boot!r}); got {want!r}")
            out[f"{MLX_KEY_PREFIX}{bdf}/{name}"] = want
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        kind, bdf, name = _split(key)
        if value == ABSENT:
            return None  # a parameter or a firmware cannot be removed
        if kind == "fw":
            if value != spec.firmware.version or spec.firmware.image_dir is None:
                return None  # only the pinned version's image is at hand
            return f"mlxfwmanager -u -f -y -d {q(bdf)} -D {q(sysroot_path(sysroot, spec.firmware.image_dir))}"
        return f"mlxconfig -y -d {q(bdf)} set {q(name + '=' + mlx_input(value))}"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        kind, bdf, _ = _split(key)
        if kind == "fw":
            return f"mlxfwmanager --query -d {q(bdf)}"
        return f"mlxconfig -d {q(bdf)} -e q"  # one query per NIC serves all of its keys

    def parse_read(self, key: str, output: str) -> str:
        kind, _, name = _split(key)
        if kind == "fw":
            return _fw_version(output) or ""
        devices = _parse_query(output).devices
        p = devices[0].params.get(name) if devices else None
        return (p.next_boot or "") if p else ""

    def same(self, have: str, want: str) -> bool:
        """mlxconfig values compare as mlxconfig reads them (``True(1)`` = ``True``); firmware versions
        and ABSENT as exact words (:func:`~tuning.parsers.mlxtools.mlx_same`)."""
        return mlx_same(have, want)

    def effect(self, key: str, before: str | None, after: str, facts: NodeFacts) -> str:
        """``pending_reset`` unless the NIC already runs ``after`` (Current equals it: a set that only
        takes back a pending value)."""
        kind, bdf, name = _split(key)
        netdev = next((n for n, b in _cards(facts) if b == bdf), "")
        if kind == "fw":
            return "live" if facts.raw.get(f"fwrun/{netdev}") == after else "pending_reset"
        p = (_params(facts, netdev) or {}).get(name)
        return "live" if p is not None and p.current is not None and mlx_same(p.current, after) else "pending_reset"

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """``pending-reset`` per value written but not active (see :func:`pending_resets`)."""
        return [Finding(device, self.name, "pending-reset",
                        f"{p['key']}: running {p['current']}, {p['next_boot']} after the next reboot or mlxfwreset",
                        f"{p['netdev']}: Current {p['current']}, Next Boot {p['next_boot']}")
                for p in _pending(facts)]


def _pending(facts: NodeFacts) -> list[dict]:
    out = []
    for netdev, bdf in _cards(facts):
        for p in (_params(facts, netdev) or {}).values():
            if p.pending:
                out.append({"key": f"{MLX_KEY_PREFIX}{bdf}/{p.name}", "bdf": bdf, "netdev": netdev,
                            "current": p.current, "next_boot": p.next_boot})
        running, flash = facts.raw.get(f"fwrun/{netdev}", ABSENT), _fw_flash(facts, netdev)
        if flash is not None and running != ABSENT and running != flash:
            out.append({"key": f"{FW_KEY_PREFIX}{bdf}", "bdf": bdf, "netdev": netdev, "current": running,
                        "next_boot": flash})
    return out


def pending_resets(state) -> list[dict]:
    """Values written to a NIC's flash but not active, decided from the Current and Next Boot columns
    only (and the running vs flashed firmware version).

    Args:
        state: a :class:`tuning.node.NodeState` collected with the firmware domain.

    Returns:
        ``[{"key": "mlxconfig/0000:0c:00.0/NUM_OF_VFS", "bdf": "0000:0c:00.0", "netdev": "enp12s0np0",
        "current": "0", "next_boot": "8"}, ...]`` (``fw/<bdf>``: running and flashed versions), every
        parameter of each queried NIC, not only the profile's; ``[]`` when nothing waits for a reset.
    """
    return _pending(state.facts)


def _reset_script(sysroot: str, bdfs: list[str]) -> str:
    lines = [nodelock.prelude(sysroot).rstrip("\n")]
    for bdf in bdfs:
        lines.append(f"mlxfwreset -d {q(bdf)} reset -y >&2 || {{ rc=$?; echo '@@reset-failed {bdf}' >&2; exit $rc; }}")
    for bdf in bdfs:
        fw_ver = q(sysroot_path(sysroot, f"/sys/bus/pci/devices/{bdf}")) + "/infiniband/*/fw_ver"
        lines.append(f"printf '@@q\\t%s\\t%s\\n' {q(bdf)} \"$(mlxconfig -d {q(bdf)} -e q 2>&1 | base64 -w0)\"")
        lines.append(f"for f in {fw_ver}; do printf '@@fw\\t%s\\t%s\\n' {q(bdf)} \"$(cat \"$f\")\"; break; done")
    return "\n".join(lines) + "\n"


def resets_due(dev, changes: list) -> bool:
    """Whether :func:`reset_pending` would reset a NIC for ``changes`` (``firmware.allow_reset`` and a
    firmware change left pending); :func:`tuning.node.apply` then pushes the firmware changes first."""
    return dev.spec.firmware.allow_reset and any(
        (c.domain if isinstance(c, Change) else c["domain"]) == "firmware"
        and (c.effect if isinstance(c, Change) else c.get("effect")) == "pending_reset" for c in changes)


def reset_pending(host: Host, dev, changes: list) -> list[str]:
    """Run ``mlxfwreset -d BDF reset -y`` once per NIC that ``changes`` left pending, then check that
    every such value is now Current (one round trip, under the node lock).

    Only with ``firmware.allow_reset``; only NICs of this run's firmware changes whose effect is
    ``pending_reset`` (a value left pending by an earlier run is reported, never reset again).

    Args:
        host: the node.  dev: its inventory Device.  changes: the changes just applied (Change or dicts).

    Returns:
        The PCI addresses reset, in order (``[]`` when none was due or allowed).

    Raises:
        CommandError: ``mlxfwreset`` failed (its text; ``err.applied`` = ``changes``).
        VerifyError: a value is still not Current after the reset, naming each key, what runs and what
            was wanted; fabtune does not reset again (``err.applied`` = ``changes``, ``err.mismatches``).
    """
    items = [c if isinstance(c, Change) else Change(**c) for c in changes]
    due = [c for c in items if c.domain == "firmware" and c.effect == "pending_reset"]
    if not resets_due(dev, due):
        return []
    bdfs = list(dict.fromkeys(_split(c.key)[1] for c in due))
    res = host.run(_reset_script(host.sysroot, bdfs), timeout=RESET_TIMEOUT_S * len(bdfs) + 150.0)
    if res.rc != 0:
        failed = next((l.split()[1] for l in res.stderr.splitlines() if l.startswith("@@reset-failed")), bdfs[0])
        err = CommandError(f"mlxfwreset -d {failed} reset -y", res.rc, res.stderr.strip()[-2000:],
                           host=dev.name, phase="reset")
        err.applied = items  # type: ignore[attr-defined]
        raise err
    bad = _still_pending(due, *_read_after_reset(res.stdout))
    if bad:
        err2 = VerifyError(f"still not active after one mlxfwreset of {', '.join(bdfs)}: " + "; ".join(bad[:8])
                           + "; not resetting again: a reboot (power cycle) of the node loads them",
                           host=dev.name, phase="reset")
        err2.applied = items  # type: ignore[attr-defined]
        err2.mismatches = bad  # type: ignore[attr-defined]
        raise err2
    return bdfs


def _read_after_reset(stdout: str) -> tuple[dict[str, Mlxconfig], dict[str, str]]:
    """The reset script's read-back: ``({bdf: its mlxconfig query}, {bdf: its running firmware})``."""
    queried, running = {}, {}
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] == "@@q":
            queried[parts[1]] = _parse_query(base64.b64decode(parts[2]).decode(errors="replace"))
        elif len(parts) == 3 and parts[0] == "@@fw":
            running[parts[1]] = parts[2].strip()
    return queried, running


def _still_pending(due: list[Change], queried: dict[str, Mlxconfig], running: dict[str, str]) -> list[str]:
    """``key: Current X after mlxfwreset, wanted Y`` for each change that is not active."""
    bad = []
    for c in due:
        kind, bdf, name = _split(c.key)
        if kind == "fw":
            have = running.get(bdf)
            if have != c.after:
                bad.append(f"{c.key}: running {have!r} after mlxfwreset, wanted {c.after!r}")
            continue
        devices = queried[bdf].devices if bdf in queried else []
        p = devices[0].params.get(name) if devices else None
        if p is None or not mlx_same(p.current, c.after):
            shown = "unread" if p is None else repr(p.current)
            bad.append(f"{c.key}: Current {shown} after mlxfwreset, wanted {c.after!r}"
                       + (f" (Next Boot {p.next_boot!r})" if p is not None else ""))
    return bad
