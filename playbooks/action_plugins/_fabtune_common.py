"""What the fabtune action plugins share: Ansible's variables -> fabtune's core inputs.

No tuning logic here: the host's variables as Ansible resolved them (extra vars, vault, group_vars
folders, group ``vars:``; every template rendered with the task's templar) go to
:func:`tuning.inventory_vars.device_from_vars` / :func:`tuning.inventory_vars.from_hostvars`, the playbooks'
extra vars (``fabtune_*``, docs/ansible.md) to :class:`tuning.rollout.steps.StepOptions`.
Not an action plugin itself (its name starts with ``_``); the plugins import it from their folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean

try:
    from tuning import errors, inventory_vars
except ImportError:  # a checkout that is not pip-installed: the repository root is two levels up
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tuning import errors, inventory_vars
from tuning import targets
from tuning.rollout import steps
from tuning.rollout.journal import DEFAULT_DIR, check_dir
from tuning.rollout.journal_check import check_run_id
from tuning.transport import become

#: every domain (:func:`tuning.targets.domains`: the node domains, ``switch``, ``sm``): the task files and tags
DOMAINS = list(targets.domains())
#: Ansible's own variables (magic, play state): never inventory settings
SKIP = frozenset(C.INTERNAL_STATIC_VARS) | {"omit", "playbook_dir", "play_hosts", "role_names", "role_name",
                                            "role_path", "vars", "environment", "ansible_check_mode"}
#: the become password is handed over as its vault ciphertext (decrypted at connect, never templated here)
PASSWORD_KEYS = set(become.PASSWORD_KEYS)


def fail(e: Exception) -> AnsibleActionFail:
    """A core error as the task's one-line failure (its message never holds a secret), with the
    core's ``exit_code`` in the result (:class:`tuning.errors.TuningError`: 2 bad input, 3 rollback
    failed, 4 unreachable, 1 other), as ``fabtune`` would exit."""
    return AnsibleActionFail(str(e), result={"exit_code": getattr(e, "exit_code", 1)})


def _vault(value: object) -> object:
    """A vault value as the ``{"__ansible_vault": ciphertext}`` form the core reads, else ``value``."""
    text = getattr(value, "_ciphertext", None)
    if isinstance(text, (str, bytes)):
        return {become.VAULT_KEY: text.decode() if isinstance(text, bytes) else text}
    return value


def native(value: object) -> object:
    """``value`` as plain Python data: ansible-core 2.19 hands over tagged subclasses of str, int,
    dict and list (``_AnsibleTaggedStr``...), which the core would name in its messages."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {native(k): native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [native(v) for v in value]
    return value


def host_vars(templar, vars_, host: str | None = None) -> dict:
    """One host's variables, templated, without Ansible's own (:data:`SKIP`); the become password
    stays its vault ciphertext.

    Raises:
        AnsibleActionFail: a value Ansible cannot render (a vault value it cannot decrypt, a broken
            template): one line naming the host and the key, as the core names its refusals.
    """
    host = host or str(vars_.get("inventory_hostname", "?"))
    out = {}
    for key in list(vars_):
        if key in SKIP or str(key).startswith("__"):
            continue
        try:
            value = vars_[key]
            out[key] = _vault(value) if key in PASSWORD_KEYS else native(templar.template(value))
        except AnsibleError as e:
            problem = " ".join(str(getattr(e, "message", e)).split())[:300]
            raise AnsibleActionFail(f"ansible hostvars of {host}: {key}: {problem}",
                                    result={"exit_code": 2}) from None
    return out


def register_vault(loader) -> None:
    """Let the core decrypt vault values with the playbook's own secrets (``--vault-id``, ``--ask-vault-pass``)."""
    vault = getattr(loader, "_vault", None)
    if vault is not None and getattr(vault, "secrets", None):
        become.decrypt_hook = lambda text: vault.decrypt(text.encode()).decode()


def inventory_dir(task_vars: dict) -> Path:
    """The inventory directory Ansible read the host from (``inventory_dir``, else ``inventory_file``'s folder).

    Raises:
        AnsibleActionFail: the host came from no inventory file (e.g. ``add_host``).
    """
    if task_vars.get("inventory_dir"):
        return Path(str(task_vars["inventory_dir"]))
    if task_vars.get("inventory_file"):
        return Path(str(task_vars["inventory_file"])).parent
    raise AnsibleActionFail("fabtune: the host has no inventory_dir; use an inventory directory (-i inventory/lab)")


def domains_of_tags(task_vars: dict, given: list[str] | None = None) -> set[str] | None:
    """The domains of this run: ``given``, else those ``--tags`` / ``--skip-tags`` select (None: all)."""
    if given:
        return set(given)
    run = set(task_vars.get("ansible_run_tags") or ["all"])
    skip = set(task_vars.get("ansible_skip_tags") or [])
    chosen = set(DOMAINS) if "all" in run or not run & set(DOMAINS) else run & set(DOMAINS)
    chosen -= skip
    return None if chosen == set(DOMAINS) else chosen


def _int(task_vars: dict, key: str) -> int | None:
    value = task_vars.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not str(value).strip().isdigit():
        raise AnsibleActionFail(f"{key}: {str(value)[:40]!r} is not a whole number; allowed: digits")
    return int(str(value).strip())


def step_options(task_vars: dict, check: bool, domains: set[str] | None, verify_default: bool = True) -> steps.StepOptions:
    """The playbooks' extra vars as StepOptions (docs/ansible.md lists them with their defaults).

    Raises:
        AnsibleActionFail: a flag that is not a boolean, a number that is not a whole number.
        InputError: ``fabtune_journal_dir`` refused as the CLI refuses ``--journal-dir``
            (:func:`tuning.rollout.journal.check_dir`: empty, not a directory, another user's,
            group/world-writable).
    """
    try:
        verify = boolean(task_vars.get("fabtune_verify", verify_default), strict=True)
        firmware = boolean(task_vars.get("fabtune_allow_firmware", False), strict=True)
        overwrite = boolean(task_vars.get("fabtune_allow_overwrite_files", False), strict=True)
    except TypeError as e:
        raise AnsibleActionFail(f"fabtune_verify / fabtune_allow_firmware / fabtune_allow_overwrite_files: {e}") \
            from None
    serial = task_vars.get("fabtune_serial")
    if isinstance(serial, list):
        serial = ",".join(str(x) for x in serial)
    journal = task_vars.get("fabtune_journal_dir") or DEFAULT_DIR
    journal_dir = check_dir(os.path.expanduser(str(journal)), "fabtune_journal_dir")
    return steps.StepOptions(journal_dir=journal_dir, verify=verify,
                             confirm_s=_int(task_vars, "fabtune_confirm_s"), allow_firmware=firmware,
                             allow_overwrite_files=overwrite,
                             domains=domains, serial=None if serial is None else str(serial),
                             max_fail_percentage=_int(task_vars, "fabtune_max_fail_percentage"), check=check)


def run_id(task_vars: dict) -> str | None:
    """The run's id: the extra var ``fabtune_run_id``, else the one the begin stage registered
    (``__fabtune_begin``; never a cached fact: a fact cache would hand an old run's id to a new run).

    Raises:
        InputError: not a run id (:func:`tuning.rollout.journal_check.check_run_id`, as the CLI's
            ``RUN_ID``): ``-e fabtune_run_id=../../x`` never names a path outside the journal folder.
    """
    given = task_vars.get("fabtune_run_id")
    begun = task_vars.get("__fabtune_begin") or {}
    found = str(given) if given else (begun.get("run_id") if isinstance(begun, dict) else None)
    return None if found is None else check_run_id(native(found), "fabtune_run_id")


def diff_entries(changes: list[dict]) -> list[dict]:
    """One Ansible diff entry per changed key: ``key = value`` lines (a file's content for ``files``).

    Returns:
        ``[{"before_header", "after_header", "before", "after"}, ...]`` as the default callback prints.
    """
    def side(ch: dict, value: str | None) -> str:
        if ch["domain"] == "files":
            return value or ""
        return f"{ch['key']} = {'(absent)' if value is None else value}\n"

    return [{"before_header": f"{ch['device']} {ch['key']}", "after_header": f"{ch['device']} {ch['key']}",
             "before": side(ch, ch["before"]), "after": side(ch, ch["after"])} for ch in changes]


__all__ = ["errors", "inventory_vars", "steps"]
