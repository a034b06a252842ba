"""Devices from a host's variables as Ansible resolved them (the Ansible front end, issue 9), through
the SAME validation as :func:`tuning.inventory.load` (:func:`tuning.inventory._build`: strict model,
near-miss refusal, grammar; the cross-host checks in :func:`from_hostvars`). Re-exported by
:mod:`tuning.inventory`. No Ansible import: the front end hands plain data over, templated.

Errors name the file as ``"ansible hostvars of HOST"`` (Ansible's merged variables no longer say
which file set a key).
"""

from __future__ import annotations

import json
from pathlib import Path

from tuning.checks import check_addresses, check_cabling, check_qos
from tuning.errors import InputError
from tuning.inventory import Device, Inventory, _build, _role_of, _validate_policy
from tuning.model.roles import ROLE_GROUPS, other_keys
from tuning.model.policy import POLICY_KEY, RolloutPolicy

#: variables a front end (the playbooks' extra vars, the facts the Ansible plugin sets) may carry
#: beside the inventory's own: never a setting, so never refused as an unknown ``fabtune_*`` key
FRONT_END_KEYS = frozenset({
    "fabtune_run_id", "fabtune_journal_dir", "fabtune_serial", "fabtune_max_fail_percentage", "fabtune_verify",
    "fabtune_allow_reboot", "fabtune_allow_firmware", "fabtune_allow_overwrite_files", "fabtune_confirm_s",
    "fabtune_reboot_required", "fabtune_pending_reset", "fabtune_rails", "fabtune_burnin"})


def _hostvars_source(source: str, host: str) -> str:
    return f"{source} of {host}"


def _extra_var_hint(err: InputError, vars_: dict) -> InputError:
    """``err`` with a hint when the refused value is a string that reads as a number, a boolean, a
    list or a mapping: Ansible's ``-e KEY=VALUE`` always gives a string, and the model is strict."""
    value = vars_.get(err.key.split(".")[0])
    for part in err.key.split(".")[1:]:
        value = value.get(part) if isinstance(value, dict) else (
            value[int(part)] if isinstance(value, list) and part.isdigit() and int(part) < len(value) else None)
    try:
        typed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        typed = None
    if typed is None or isinstance(typed, str):
        return err
    top = err.key.split(".")[0]
    return InputError(err.file, err.key, f"{err.problem}; an -e KEY=VALUE extra var is always a string: "
                      f"pass JSON instead, e.g. -e '{json.dumps({top: vars_.get(top) if top != err.key else typed})}'")


def device_from_vars(inv_dir: str | Path, host: str, groups: list[str], vars_: dict,
                     source: str = "ansible hostvars", shared_keys: set[str] | None = None) -> Device | None:
    """One Device from a host's variables as Ansible resolved them (extra vars, vault values,
    ``group_vars/<g>/`` folders and group ``vars:`` already merged by Ansible's precedence, every
    template already rendered by the front end), through the same validation as :func:`load`.

    Args:
        inv_dir: the inventory directory (``fabtune_*_file`` paths are relative to it).
        groups: the host's groups (Ansible's ``group_names``; ``all`` may be left out).
        vars_: the host's variables; front-end variables (:data:`FRONT_END_KEYS`) are ignored.
        source: how errors name where the values came from (``"ansible hostvars of node01"``).
        shared_keys: keys of the other role this host may carry because a group of both roles
            set them (:func:`from_hostvars` finds them: the same value on a host of the other
            role); None (one host alone): every key of the other role is left alone, since
            Ansible's merged variables no longer say which group set a key.

    Returns:
        The Device, or None for a host in no role group (a site's login node).

    Raises:
        InputError: as :func:`load`, the file named ``"<source> of <host>"``; a string where the
            model wants another type carries the hint to pass ``-e`` as JSON.
    """
    inv = Path(inv_dir)
    groups = ["all", *[g for g in groups if g != "all"]]
    where = _hostvars_source(source, host)
    role = _role_of(Path(where), host, groups)
    if role is None:
        return None
    vars_ = {k: v for k, v in vars_.items() if k not in FRONT_END_KEYS}
    other = other_keys(ROLE_GROUPS[role])
    scopes = {k: ("all" if k in other and (shared_keys is None or k in shared_keys) else None) for k in vars_}
    try:
        return _build(inv, host, groups, role, (vars_, {k: where for k in vars_}, scopes), {"all"})
    except InputError as e:
        raise _extra_var_hint(e, vars_) from None


def from_hostvars(inv_dir: str | Path, hostvars: dict[str, dict], groups_of: dict[str, list[str]],
                  source: str = "ansible hostvars") -> Inventory:
    """A whole Inventory from Ansible's resolved hostvars (``{host: vars}``) and each host's groups
    (``{host: [group, ...]}``): every host through :func:`device_from_vars`, then the cross-host
    checks of :func:`load` (cabling, addresses, QoS). ``fabtune_rollout`` must be the same on every
    host that sees it (Ansible no longer says which group set it: one policy per run).

    Raises:
        InputError: as :func:`device_from_vars`; a ``fabtune_rollout`` that differs between hosts.
    """
    inv = Path(inv_dir)
    roles = {h: r for h, g in groups_of.items() if (r := _role_of(Path(_hostvars_source(source, h)), h,
                                                                     ["all", *g])) is not None}
    seen: dict[str, set[str]] = {g: set() for g in ROLE_GROUPS}  # role group -> repr(key, value) its hosts hold
    for h, r in roles.items():
        seen[r] |= {repr((k, v)) for k, v in hostvars.get(h, {}).items()}
    devices: dict[str, Device] = {}
    for h, r in roles.items():
        theirs = set().union(*(held for g, held in seen.items() if g != r))
        shared = {k for k, v in hostvars.get(h, {}).items() if repr((k, v)) in theirs}
        dev = device_from_vars(inv, h, groups_of[h], hostvars.get(h, {}), source, shared)
        if dev is not None:
            devices[h] = dev
    where = Path(source)
    check_cabling(devices, where)
    check_addresses(devices, where)
    check_qos(devices)
    return Inventory(inv, devices, _policy_of_hostvars(hostvars, sorted(roles), source))


def _policy_of_hostvars(hostvars: dict[str, dict], hosts: list[str], source: str) -> RolloutPolicy:
    """The run's policy from ``fabtune_rollout`` in Ansible's hostvars (see :func:`from_hostvars`)."""
    seen = [(h, hostvars.get(h, {})[POLICY_KEY]) for h in hosts if POLICY_KEY in hostvars.get(h, {})]
    if not seen:
        return RolloutPolicy()
    first, value = seen[0]
    held = dict(seen)
    odd = next((h for h in hosts if h not in held or held[h] != value), None)
    if odd is not None:
        raise InputError(_hostvars_source(source, odd), POLICY_KEY, f"differs from {first}'s (or is unset); a run has "
                         "one rollout policy: set it for the all group (group_vars/all.yml or -e)")
    return _validate_policy(value, _hostvars_source(source, first))


def policy_of_vars(vars_: dict, host: str, source: str = "ansible hostvars") -> RolloutPolicy:
    """The rollout policy one host's resolved variables give (``fabtune_rollout``; defaults when
    unset); :func:`from_hostvars` checks that every host gives the same.

    Raises:
        InputError: a value the policy refuses (names ``"<source> of <host>"`` and the key).
    """
    if POLICY_KEY not in vars_:
        return RolloutPolicy()
    return _validate_policy(vars_[POLICY_KEY], _hostvars_source(source, host))
