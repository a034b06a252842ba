"""Issue 9: ansible-runner artifacts, journals, reports and output hold no secret from the inventory.

On a fresh lab whose sudo asks for a password (tuning.lab.privileges.require_password), three
canaries: a become password vault-encrypted in the inventory (a test vault password file), a site
secret vault-encrypted in an inventory var, and a plain inventory string. Then:

1. ``playbooks/tune.yml --check --diff`` through ansible-runner (as a CI pipeline calls it);
2. ``fabtune rollout --engine ansible`` with the vault password file (the change lands: sudo took
   the vault's password), every report written and ansible-runner's artifacts kept;
3. after ``fabtune rollback``, the lab's sudo password changed and given as ``FABTUNE_BECOME_PASSWORD``
   (the other path) instead: the change lands again.

Every file ansible-runner left, the journals, the reports, the lab's own logs and every stdout and
stderr are searched for each canary: zero hits.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import ansible_runner
import pytest

from tests.ansible.test_engine_ansible import fabtune
from tuning.lab import privileges

pytestmark = [pytest.mark.ansible, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
BECOME_VAULT = "canary-become-a81f3e"   # ansible_become_password, vault-encrypted in group_vars
BECOME_ENV = "canary-envpw-5c2d90"      # FABTUNE_BECOME_PASSWORD
SITE_SECRET = "canary-site-0e77b4"      # an inventory var, vault-encrypted
SITE_PLAIN = "canary-plain-93a1d2"      # an inventory var in clear text
CANARIES = (BECOME_VAULT, BECOME_ENV, SITE_SECRET, SITE_PLAIN)
VAULT_PASSWORD = b"test-vault-password-7"
ROLLOUT = ("--domain", "mtu", "--domain", "sysctl", "--no-incast", "--min-bw", "0")  # mtu: the RoCE MTU check


def _vault_block(key: str, secret: str) -> str:
    """``key: !vault |`` with ``secret`` encrypted by :data:`VAULT_PASSWORD` (ansible-vault's format)."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    cipher = VaultLib([("default", VaultSecret(VAULT_PASSWORD))]).encrypt(secret.encode()).decode()
    return f"{key}: !vault |\n" + "".join(f"  {line}\n" for line in cipher.splitlines())


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in sorted(root.rglob("*")) if p.is_file()]


def _hits(texts: dict[str, str]) -> list[str]:
    return [f"{canary} in {where}" for where, text in texts.items() for canary in CANARIES if canary in text]


def _rmem(inv: Path) -> str:
    return (inv / ".state/nodes/node01/sysroot/proc/sys/net/core/rmem_max").read_text().strip()


def test_no_secret_in_artifacts_journals_reports_or_output(lab_inventory: Path, tmp_path: Path) -> None:
    inv, state = lab_inventory, lab_inventory / ".state"
    vault_file = tmp_path / "vault-pass"
    vault_file.write_bytes(VAULT_PASSWORD + b"\n")
    vault_file.chmod(0o600)
    with (inv / "group_vars" / "gpu_nodes.yml").open("a") as f:
        f.write(_vault_block("ansible_become_password", BECOME_VAULT))
    with (inv / "group_vars" / "all.yml").open("a") as f:
        f.write(_vault_block("site_api_token", SITE_SECRET) + f"site_ticket_note: {SITE_PLAIN}\n")
    privileges.require_password(state, BECOME_VAULT)
    untuned = _rmem(inv)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    base_env = {k: v for k, v in os.environ.items() if k != "FABTUNE_BECOME_PASSWORD"}
    seen: dict[str, str] = {}

    # 1. check mode through ansible-runner, artifacts kept in its private data dir
    runner_dir = tmp_path / "runner-check"
    runner_dir.mkdir()
    r = ansible_runner.run(private_data_dir=str(runner_dir), project_dir=str(REPO), playbook="playbooks/tune.yml",
                           inventory=str(inv), cmdline="--check --diff", tags="sysctl", quiet=True,
                           envvars={"PATH": path, "ANSIBLE_VAULT_PASSWORD_FILE": str(vault_file)},
                           extravars={"fabtune_journal_dir": str(tmp_path / "j-check")})
    seen["check stdout"] = r.stdout.read()
    assert (r.status, r.rc) == ("successful", 0), seen["check stdout"][-3000:]
    planned = [ev for ev in r.events if ev.get("event") == "runner_on_ok"
               and "net.core.rmem_max" in json.dumps((ev["event_data"].get("res") or {}).get("changes", []))]
    assert planned, "check mode planned no sysctl change"
    assert _rmem(inv) == untuned  # check mode pushed nothing

    # 2. the CLI through ansible-runner, the become password from the inventory's vault
    env = {**base_env, "ANSIBLE_VAULT_PASSWORD_FILE": str(vault_file), "FABTUNE_ANSIBLE_ARTIFACTS": str(tmp_path / "art")}
    reports = tmp_path / "reports"
    reports.mkdir()
    vault_run = fabtune("rollout", "-i", str(inv), *ROLLOUT, "--engine", "ansible", "--journal-dir",
                        str(tmp_path / "j"), "--report-json", str(reports / "vault.json"), "--junit",
                        str(reports / "vault.xml"), "--prom-file", str(reports / "vault.prom"), env=env)
    seen.update({"vault run stdout": vault_run.stdout, "vault run stderr": vault_run.stderr})
    assert vault_run.returncode == 0, vault_run.stdout[-3000:] + vault_run.stderr[-3000:]
    assert _rmem(inv) == "268435456" != untuned  # sudo took the vault's password
    run_id = json.loads((reports / "vault.json").read_text())["run_id"]
    # a journal never keeps a password (nor its ciphertext): `fabtune rollback` takes it from the environment
    rolled = fabtune("rollback", run_id, "--journal-dir", str(tmp_path / "j"),
                     env={**env, "FABTUNE_BECOME_PASSWORD": BECOME_VAULT})
    seen.update({"rollback stdout": rolled.stdout, "rollback stderr": rolled.stderr})
    assert rolled.returncode == 0 and _rmem(inv) == untuned, rolled.stdout + rolled.stderr

    # 3. the other path: FABTUNE_BECOME_PASSWORD (the inventory's vault value no longer opens sudo)
    privileges.require_password(state, BECOME_ENV)
    env = {**env, "FABTUNE_BECOME_PASSWORD": BECOME_ENV}
    env_run = fabtune("rollout", "-i", str(inv), *ROLLOUT, "--engine", "ansible", "--journal-dir",
                      str(tmp_path / "j"), "--report-json", str(reports / "env.json"), "--junit",
                      str(reports / "env.xml"), "--prom-file", str(reports / "env.prom"), env=env)
    seen.update({"env run stdout": env_run.stdout, "env run stderr": env_run.stderr})
    assert env_run.returncode == 0, env_run.stdout[-3000:] + env_run.stderr[-3000:]
    assert _rmem(inv) == "268435456"

    artifacts = _files(runner_dir, tmp_path / "art")
    names = {p.name for p in artifacts}
    assert {"command", "stdout"} <= names and len([p for p in artifacts if p.parent.name == "job_events"]) > 20
    kept = _files(tmp_path / "art")
    assert len({p.relative_to(tmp_path / "art").parts[0] for p in kept}) == 2  # one copy per CLI run
    for p in kept:  # the env handed to ansible-playbook never holds the password, not even its name
        if p.name == "command":
            assert "FABTUNE_BECOME_PASSWORD" not in json.loads(p.read_text())["env"]
    files = artifacts + _files(tmp_path / "j", tmp_path / "j-check", reports) + [p for p in state.glob("*") if p.is_file()]
    seen.update({str(p): p.read_text(errors="replace") for p in files})
    assert len(seen) > 60
    assert _hits(seen) == []
    assert not [p for p in (tmp_path / "j").glob("ansible-*")], "the private data dir was left behind"
