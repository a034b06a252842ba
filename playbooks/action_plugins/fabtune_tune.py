"""Ansible action plugin ``fabtune_tune``: the thin Ansible front end of fabtune's core.

Runs on the controller (after Arista AVD's action plugins): it loads the same inventory
Ansible was given with :func:`tuning.inventory.load`, runs the rollout engine for the one
host of the task and returns the engine's changes. No tuning knowledge lives here or in
the YAML; the core opens SSH itself (hosts use ``ansible_connection: local``).

Task arguments:
    domains: list of node/switch domains to tune (``mtu``, ``sysctl``, ``nic_qos``, ``irq``,
        ``files``, ``switch``). Required.
    journal_dir: where the engine writes its run journal (default: the engine's
        ``.fabtune/journal`` under the current directory).

Check mode runs the engine in ``plan`` mode (nothing pushed); otherwise ``apply``.

Example::

    - name: Node MTU
      fabtune_tune:
        domains: [mtu]

Returns (per host)::

    {"changed": true, "outcome": "planned", "run_id": null,
     "changes": [{"device": "node01", "domain": "mtu", "key": "mtu/enp12s0np0",
                  "before": "1500", "after": "9000", "reversible": true}],
     "diff": [{"before_header": "node01 mtu/enp12s0np0", "after_header": "node01 mtu/enp12s0np0",
               "before": "mtu/enp12s0np0 = 1500\\n", "after": "mtu/enp12s0np0 = 9000\\n"}]}

``diff`` is present only with ``--diff``. A :class:`tuning.errors.TuningError` becomes
``AnsibleActionFail`` with the error's one-line message.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# Imported at module level on purpose: the strategy loads this class in the controller's main
# process, so the forked per-host workers inherit the imported core instead of paying ~1-2 s each.
try:
    from tuning import errors, inventory
except ImportError:  # a checkout that is not pip-installed: the repository root is two levels up
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tuning import errors, inventory
from tuning.rollout import engine

DOMAINS = ["mtu", "sysctl", "nic_qos", "irq", "files", "switch"]
ARGUMENT_SPEC = {
    "domains": {"type": "list", "elements": "str", "required": True, "choices": DOMAINS},
    "journal_dir": {"type": "path", "required": False},
}


def inventory_path(task_vars: dict) -> Path:
    """The inventory directory Ansible read this host from (``inventory_dir``, else ``inventory_file``'s folder).

    Raises:
        AnsibleActionFail: the host came from no inventory file (e.g. ``add_host``).
    """
    if task_vars.get("inventory_dir"):
        return Path(str(task_vars["inventory_dir"]))
    if task_vars.get("inventory_file"):
        return Path(str(task_vars["inventory_file"])).parent
    raise AnsibleActionFail("fabtune_tune: host has no inventory_dir; use an inventory directory (-i inventory/lab)")


def _side(ch: dict, value: str | None) -> str:
    """A file's own content (``files`` domain), else one ``key = value`` line; ``(absent)`` for None."""
    if ch["domain"] == "files":
        return value or ""
    return f"{ch['key']} = {'(absent)' if value is None else value}\n"


def diff_entries(changes: list[dict]) -> list[dict]:
    """One Ansible diff entry per changed key: ``key = value`` lines (a file's content for ``files``).

    Args:
        changes: engine change dicts (device, domain, key, before, after, reversible).

    Returns:
        ``[{"before_header", "after_header", "before", "after"}, ...]`` as the default callback prints.
    """
    out = []
    for ch in changes:
        header = f"{ch['device']} {ch['key']}"
        out.append({"before_header": header, "after_header": header,
                    "before": _side(ch, ch["before"]), "after": _side(ch, ch["after"])})
    return out


class ActionModule(ActionBase):
    """``fabtune_tune``: plan (check mode) or apply the selected domains on ``inventory_hostname``."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        """Run the engine for this host; see the module docstring for arguments and return shape."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = str(task_vars.get("inventory_hostname", ""))
        opts = engine.Options(mode="plan" if self._task.check_mode else "apply", limit=[host],
                              domains=set(args["domains"]), lock_wait_s=600.0)  # hosts take the inventory lock in turn
        if args.get("journal_dir"):
            opts.journal_dir = Path(args["journal_dir"])
        try:
            report = engine.run(inventory.load(inventory_path(task_vars)), opts)
        except errors.TuningError as e:
            raise AnsibleActionFail(str(e)) from None
        changes = report.changes.get(host, [])
        kept = report.outcome != "rolled-back"  # a failed apply was restored: the host is as before
        result.update(changed=bool(changes) and kept, changes=changes, outcome=report.outcome, run_id=report.run_id)
        if report.errors:
            result.update(failed=True, msg="; ".join(f"{d}: {e}" for d, e in report.errors.items()))
        if self._task.diff and changes:
            result["diff"] = diff_entries(changes)
        return result
