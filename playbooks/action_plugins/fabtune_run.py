"""Ansible action plugin ``fabtune_run``: the once-per-run stages of a playbook run, through
fabtune's core (:mod:`tuning.rollout.steps`). Use it with ``run_once: true``.

Stages (argument ``stage``):
    begin: validate the WHOLE inventory from Ansible's hostvars once
        (:func:`tuning.inventory_vars.from_hostvars`), take the inventory's lock in the name of the
        ``ansible-playbook`` process, plan every selected host (the play's hosts after
        ``--limit``), refuse an unsafe play order or an unallowed firmware burn, create the run's
        journal (``engine: ansible``) and measure the baseline of a verified run. Register it as
        ``__fabtune_begin``: the other tasks take the run id from there.
    verify: the batch gate after a node batch (``batch``: ``ansible_play_batch``): verify, confirm
        the batch's switches, or restore the batch and fail (use ``any_errors_fatal``). Without a run
        (``verify.yml``): verify the fabric against the recorded baseline, nothing changed.
    end: the run's outcome, the baseline merge, the lock released.
    rollback: ``fabtune rollback RUN_ID`` (``run_id``), from the journal alone.
    burnin: D's burn-in (:func:`tuning.burnin.run.run_burnin`) over the play's nodes (``burnin.yml``).
    reboot: per host, NOT run_once (tune.yml's handler): ``systemctl reboot`` through the core
        (:func:`tuning.rollout.reboot.reboot`), then wait for SSH; never ``ansible.builtin.reboot``
        (hosts use ``ansible_connection: local``: it would reboot the controller).

Arguments: ``stage`` (required), ``batch`` (verify), ``run_id`` (rollback), ``play_order``
(begin: ``switches-first``, the order tune.yml plays). Extra vars: docs/ansible.md.

Returns ``{"changed", "run_id", "outcome", ...}``: begin adds ``batches`` and ``changes``
(per host, as ``fabtune plan``), verify ``batch``, ``ok``, ``reasons``, rollback ``restored``.
A core error fails the task with its one line (no secret: none is ever read here).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _fabtune_common as common  # noqa: E402

from tuning.errors import TuningError  # noqa: E402

STAGES = ["begin", "verify", "end", "rollback", "reboot", "burnin"]
ARGUMENT_SPEC = {"stage": {"type": "str", "required": True, "choices": STAGES},
                 "batch": {"type": "list", "elements": "str", "required": False},
                 "run_id": {"type": "str", "required": False},
                 "play_order": {"type": "str", "required": False, "default": "switches-first"}}


class _Identity:
    """A templar stand-in for values Ansible already templated."""

    @staticmethod
    def template(value):
        return value


class ActionModule(ActionBase):
    """``fabtune_run``: see the module docstring."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def _inventory(self, task_vars: dict):
        """The whole inventory from Ansible's hostvars (each host's variables templated for that host)."""
        hostvars = task_vars.get("hostvars") or {}
        groups = task_vars.get("groups") or {}
        groups_of: dict[str, list[str]] = {}
        for g, hosts in groups.items():
            for h in hosts:
                groups_of.setdefault(h, [])
                if g not in ("all", "ungrouped"):
                    groups_of[h].append(g)
        resolved = {}
        for h in groups_of:
            hv = hostvars[h]  # a view that templates on access under h's own variables
            raw = getattr(hv, "_vars", None)  # untemplated: a vault value keeps its ciphertext
            if raw is not None:
                resolved[h] = common.host_vars(getattr(hv, "_templar", self._templar), raw, h)
            else:  # an ansible-core without the view: every value already templated for h
                resolved[h] = common.host_vars(_Identity(), hv, h)
        return common.inventory_vars.from_hostvars(common.inventory_dir(task_vars), resolved, groups_of)

    def run(self, tmp=None, task_vars=None):
        """Run one stage; see the module docstring."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        common.register_vault(self._loader)
        stage, check = args["stage"], self._task.check_mode
        try:
            opts = common.step_options(task_vars, check, common.domains_of_tags(task_vars))
            if stage == "rollback":
                return {**result, **self._rollback(args, task_vars, opts)}
            if stage == "reboot":
                return {**result, **self._reboot(task_vars)}
            inv = self._inventory(task_vars)
            run_id = common.run_id(task_vars)
            if stage == "burnin":
                return {**result, **self._burnin(inv, task_vars)}
            if stage == "begin":
                hosts = [str(h) for h in task_vars.get("ansible_play_hosts_all") or []]
                out = common.steps.begin(inv, hosts, opts, os.getppid(), run_id, args["play_order"])
                return {**result, "changed": False, **out}
            if stage == "verify" and not run_id:
                return {**result, **self._verify_only(inv, opts, task_vars)}
            if run_id is None:
                raise AnsibleActionFail(f"fabtune_run {stage}: no run id; the begin stage must run first")
            if stage == "verify":
                if check:
                    return {**result, "changed": False, "skipped": True, "msg": "check mode: nothing to verify"}
                from tuning.rollout.steps_verify import verify_batch

                out = verify_batch(inv, opts, run_id, [str(h) for h in args.get("batch") or []])
                res = {**result, "changed": False, "run_id": run_id, **out}
                if not out["ok"]:
                    res.update(failed=True, msg=self._halt_msg(out, run_id))
                return res
            return {**result, "changed": False, **common.steps.end(inv, opts, run_id)}
        except TuningError as e:
            raise common.fail(e) from None

    @staticmethod
    def _halt_msg(out: dict, run_id: str) -> str:
        """A failed gate's one line: the run's halt line (it names up to 3 failed IB checks), up to 3
        failed RoCE pairs with their reasons, what was restored, the run's outcome."""
        from tuning.verify.ib_sm import PREFIX

        why = out.get("halt") or f"batch {out['batch']}: verification failed or regressed"
        pairs = "".join(f"; {r}" for r in [r for r in out["reasons"] if not r.startswith(PREFIX)][:3])
        return (f"{why}{pairs}; restored ({', '.join(out['restored']) or 'nothing'}); run {run_id} "
                f"{out['outcome']}")

    def _verify_only(self, inv, opts, task_vars: dict) -> dict:
        """``verify.yml``: every pair of the play's hosts against the pass marks and the baseline."""
        from tuning.rollout.verify_run import verify_only
        from tuning.verify.runner import Thresholds

        limit = [str(h) for h in task_vars.get("ansible_play_hosts_all") or []] or None
        th = Thresholds(**inv.policy.thresholds.model_dump())
        got = verify_only(inv, opts.journal_dir, th, lambda m: None, opts.rails, limit)
        out = {"changed": False, "ok": got.ok, "pairs": got.pairs, "incast": got.incast, "nccl": got.nccl,
               "findings": got.findings}
        if not got.ok:
            bad = [f"{p['pair']}: {'; '.join(p.get('reasons') or [])}" for p in got.pairs if p.get("status") != "pass"]
            bad += [f"{j['test']}: {'; '.join(j.get('reasons') or [])}" for j in got.nccl if j.get("status") == "fail"]
            why = '; '.join(bad[:4]) or 'an incast failed or a required nccl-tests job did not run'
            out.update(failed=True, msg=f"verification failed: {why}")
        return out

    def _burnin(self, inv, task_vars: dict) -> dict:
        """``burnin.yml``: D's :func:`tuning.burnin.run.run_burnin` over the play's nodes; options from
        the extra var ``fabtune_burnin`` (a mapping of :class:`~tuning.burnin.run.BurninOptions` fields:
        ``iterations``, ``duration_s``, ``html``, ``report_json``, ``prom_file``, ``drain_adapter``,
        ``drain``, ``max_drain``, ``rails``...; default one round). Fails when a finding is reported."""
        import dataclasses

        from tuning.burnin.run import BurninOptions, run_burnin

        if self._task.check_mode:
            return {"changed": False, "skipped": True, "msg": "check mode: no burn-in"}
        given = common.native(task_vars.get("fabtune_burnin") or {})
        known = {f.name for f in dataclasses.fields(BurninOptions)} - {"limit", "thresholds"}
        if not isinstance(given, dict) or set(given) - known:
            raise AnsibleActionFail(f"fabtune_burnin: unknown key(s) {sorted(set(given) - known) if isinstance(given, dict) else given!r}; "
                                    f"allowed: {', '.join(sorted(known))}")
        paths = {"html", "report_json", "prom_file", "drain_log"}
        opts = BurninOptions(**{k: (Path(v) if k in paths and v else tuple(v) if k == "rails" and v else v)
                                for k, v in given.items()})
        opts.limit = [h for h in (str(x) for x in task_vars.get("ansible_play_hosts_all") or [])
                      if h in inv.devices and inv.devices[h].role == "node"] or None
        doc = run_burnin(inv, opts)
        found = doc.get("findings") or []
        out = {"changed": bool((doc.get("drain") or {}).get("acted")), "run_id": doc.get("run_id"),
               "findings": found, "reports": doc.get("reports"), "unreachable_hosts": doc.get("unreachable") or []}
        if found:
            out.update(failed=True, msg="; ".join(f"{f['target']}: {f['code']}: {f['message']}" for f in found[:4]))
        return out

    def _reboot(self, task_vars: dict) -> dict:
        """Reboot THIS host (a handler: only with ``fabtune_allow_reboot``, the tasks' ``when``)."""
        if self._task.check_mode:
            return {"changed": False, "skipped": True, "msg": "check mode: not rebooted"}
        host = str(task_vars.get("inventory_hostname", ""))
        vars_ = common.host_vars(self._templar, task_vars)
        dev = common.inventory_vars.device_from_vars(common.inventory_dir(task_vars), host,
                                                list(task_vars.get("group_names") or []), vars_)
        if dev is None or dev.role != "node":
            raise AnsibleActionFail(f"reboot: {host} is not a fabtune node")
        from tuning.rollout.reboot import reboot

        out = reboot(dev, common.inventory_vars.policy_of_vars(vars_, host))
        return {"changed": True, **out, "ansible_facts": {"fabtune_reboot_required": False}}

    def _rollback(self, args: dict, task_vars: dict, opts) -> dict:
        """``fabtune rollback RUN_ID`` from the journal alone (``run_id`` argument or extra var)."""
        from tuning.rollout.rollback import rollback_run

        run_id = args.get("run_id") or task_vars.get("run_id") or task_vars.get("fabtune_run_id")
        if not run_id:
            raise AnsibleActionFail("rollback: give the run to restore: -e run_id=RUN_ID (see `fabtune runs`)")
        if self._task.check_mode:
            return {"changed": False, "skipped": True, "msg": f"check mode: run {run_id} not rolled back"}
        report = rollback_run(opts.journal_dir, str(run_id))
        return {"changed": report.outcome == "rolled-back", "run_id": str(run_id), "outcome": report.outcome,
                "restored": report.restored, "msg": report.errors.get("run", "")}
