"""Ansible action plugin ``fabtune_tune``: plan (check mode) or push the selected domains on ONE
host, through fabtune's core (:func:`tuning.rollout.steps.push`).

Runs on the controller (after Arista AVD's action plugins; hosts use ``ansible_connection:
local``, the core opens SSH itself). It takes THIS host's variables from Ansible (the task's
resolved variables, templated with the task's templar: ``-e``, vault values and group_vars folders
count) and builds only this host's Device (:func:`tuning.inventory_vars.device_from_vars`): the cost per
host does not grow with the fleet. In check mode the plan is the one ``begin`` made for every
device at once (:func:`tuning.rollout.steps.planned`): a check run reads each device once.
The whole inventory is validated once, by ``fabtune_run``'s
``begin`` stage, whose run id (registered as ``__fabtune_begin``, or the extra var ``fabtune_run_id``)
every push journals under.

Task arguments:
    domains: node domains (``tuning.node.domains()``) and/or ``switch``. Required.

Returns (per host)::

    {"changed": true, "run_id": "20261130T101500-1a2b3c",
     "changes": [{"device": "node01", "domain": "mtu", "key": "mtu/enp12s0np0", "before": "1500",
                  "after": "9000", "reversible": true, "effect": "live", ...}],
     "diff": [{"before_header": "node01 mtu/enp12s0np0", ..., "before": "mtu/enp12s0np0 = 1500\\n",
               "after": "mtu/enp12s0np0 = 9000\\n"}],
     "ansible_facts": {"fabtune_reboot_required": false, "fabtune_pending_reset": false}}

``changed`` is honest: planned changes in check mode, changes read back after the push otherwise
(a failed push was restored: failed, not changed). ``diff`` only with ``--diff``. The facts stay
true once a task of the play set them. A host that does not answer is ``unreachable``; any other
core error fails the task with its one line. No result holds a secret (the become password is
never read here: its vault ciphertext is decrypted at connect with the playbook's own secrets).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ansible.plugins.action import ActionBase

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fabtune_common as common  # noqa: E402  (beside this plugin; imported once by the controller)

from tuning.errors import ConnectError, DeviceTimeout, TuningError  # noqa: E402

ARGUMENT_SPEC = {"domains": {"type": "list", "elements": "str", "required": True, "choices": common.DOMAINS}}


class ActionModule(ActionBase):
    """``fabtune_tune``: see the module docstring."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        """Plan or push this host's domains; see the module docstring for arguments and return shape."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = str(task_vars.get("inventory_hostname", ""))
        common.register_vault(self._loader)
        try:
            opts = common.step_options(task_vars, self._task.check_mode, set(args["domains"]))
            vars_ = common.host_vars(self._templar, task_vars)
            dev = common.inventory_vars.device_from_vars(common.inventory_dir(task_vars), host,
                                                    list(task_vars.get("group_names") or []), vars_)
            if dev is None:
                return {**result, "skipped": True, "msg": f"{host} is in no fabtune role group"}
            policy = common.inventory_vars.policy_of_vars(vars_, host)
            run_id = common.run_id(task_vars)  # checked here: never a path outside the journal folder
            begun = common.native(task_vars.get("__fabtune_begin"))
            out = common.steps.planned(begun, host, opts.domains) if opts.check else None
            out = out or common.steps.push(dev, policy, opts, run_id)
        except (ConnectError, DeviceTimeout) as e:
            return {**result, "unreachable": True, "changed": False, "msg": str(e)}
        except TuningError as e:
            raise common.fail(e) from None
        facts = {f"fabtune_{k}": bool(v or task_vars.get(f"fabtune_{k}")) for k, v in out["effects"].items()}
        result.update(changed=bool(out["changes"]), changes=out["changes"], run_id=run_id,
                      ansible_facts=facts)
        if self._task.diff and out["changes"]:
            result["diff"] = common.diff_entries(out["changes"])
        return result
