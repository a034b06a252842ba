"""Issue 6 item 9: Ansible's become keys, the sudo wrapping, and a become password that reaches
sudo on stdin only: never in a command line, the journal, the report or the logs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.errors import InputError
from tuning.lab import privileges
from tuning.transport import become

REPO = Path(__file__).resolve().parents[2]
CANARY = "canary-secret-5b1e9d"
CLEAR_TEXT = ("a become password is never read from the inventory in clear text; set FABTUNE_BECOME_PASSWORD "
              "in the environment or encrypt it with `ansible-vault encrypt_string` (host node01)")


def test_wrap_is_the_command_line_sent_to_a_real_host():
    cmd = "sysctl -w net.core.rmem_max=268435456 && echo 'a b' > /proc/sys/x"
    assert become.wrap(cmd, "root", with_password=False) == \
        "sudo -n -u root -- /bin/bash -c 'sysctl -w net.core.rmem_max=268435456 && echo '\"'\"'a b'\"'\"' > /proc/sys/x'"
    assert become.wrap("true", "ops", with_password=True) == "sudo -S -p '' -u ops -- /bin/bash -c true"


def _inventory_with(tmp_path: Path, **node_vars) -> Path:
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
    path = inv / "host_vars" / "node01.yml"
    data = yaml.safe_load(path.read_text())
    data.update(node_vars)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return inv


def test_lab_inventory_uses_become_on_nodes_only():
    inv = inventory.load(REPO / "inventory" / "lab")
    assert {(d.connection.become, d.connection.become_user, d.connection.become_method) for d in inv.nodes} == \
        {(True, "root", "sudo")}
    assert {d.connection.become for d in inv.switches} == {False}


@pytest.mark.parametrize("key, value, problem", [
    ("ansible_become", "yes", "'yes' is not a boolean; allowed: true, false (host node01)"),
    ("ansible_become_method", "su", "'su' is not supported; allowed: sudo (host node01)"),
    ("ansible_become_user", "root;id", "'root;id' is not a user name; allowed: [a-z_][a-z0-9_-]{0,31} (host node01)"),
    ("ansible_become_password", CANARY, CLEAR_TEXT),
    ("ansible_become_pass", CANARY, CLEAR_TEXT),
    ("ansible_become_pass", {"__ansible_vault": CANARY}, CLEAR_TEXT),  # not a vault ciphertext
])
def test_bad_become_keys_are_refused_naming_file_and_key(tmp_path, key, value, problem):
    inv = _inventory_with(tmp_path, **{key: value})
    with pytest.raises(InputError) as err:
        inventory.load(inv)
    assert (err.value.file, err.value.key, err.value.problem) == (str(inv / "host_vars" / "node01.yml"), key, problem)
    assert CANARY not in str(err.value)


def test_become_user_is_read(tmp_path):
    inv = inventory.load(_inventory_with(tmp_path, ansible_become_user="ops"))
    assert inv.devices["node01"].connection.become_user == "ops"
    assert inv.devices["node02"].connection.become_user == "root"


def _fabtune(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)


@pytest.mark.lab
def test_become_password_from_env_applies_and_never_leaks(lab_inventory, tmp_path):
    state, journal = lab_inventory / ".state", tmp_path / "journal"
    privileges.require_password(state, CANARY)
    rmem = state / "nodes" / "node01" / "sysroot" / "proc/sys/net/core/rmem_max"
    before = rmem.read_text()
    env = {**os.environ, "FABTUNE_BECOME_PASSWORD": CANARY}
    planned = _fabtune("plan", "-i", str(lab_inventory), "--limit", "node01", "--domain", "sysctl", "--json", env=env)
    assert planned.returncode == 0 and "net.core.rmem_max" in planned.stdout, planned.stdout + planned.stderr
    applied = _fabtune("apply", "-i", str(lab_inventory), "--limit", "node01", "--domain", "sysctl",
                       "--journal-dir", str(journal), "--json", env=env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert rmem.read_text() == "268435456\n" != before
    run_id = sorted(p.stem for p in journal.glob("*.json"))[-1]
    rolled = _fabtune("rollback", run_id, "--journal-dir", str(journal), env=env)
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert rmem.read_text() == before
    seen = [planned.stdout, planned.stderr, applied.stdout, applied.stderr, rolled.stdout, rolled.stderr]
    seen += [p.read_text(errors="replace") for p in journal.rglob("*") if p.is_file()]
    seen += [p.read_text(errors="replace") for p in state.glob("*") if p.is_file()]  # lab.log, sudoers.json, ...
    assert len(seen) > 8 and not [text for text in seen if CANARY in text]


@pytest.mark.lab
def test_without_become_a_write_fails_with_the_node_text_and_changes_nothing(tmp_path, lab_inventory):
    hv = lab_inventory / "host_vars" / "node01.yml"
    hv.write_text(hv.read_text() + "ansible_become: false\n")
    rmem = lab_inventory / ".state" / "nodes" / "node01" / "sysroot" / "proc/sys/net/core/rmem_max"
    before = rmem.read_text()
    res = _fabtune("apply", "-i", str(lab_inventory), "--limit", "node01", "--domain", "sysctl",
                   "--journal-dir", str(tmp_path / "journal"), env=dict(os.environ))
    assert res.returncode != 0
    out = " ".join((res.stdout + res.stderr).split())
    # the node refuses the unprivileged user at its first root-only step, the node lock
    assert "cannot open the node lock" in out and "Permission denied" in out, out
    assert "does the inventory set ansible_become?" in out
    assert rmem.read_text() == before


def _add_vault_password(inv: Path, vault_password: bytes) -> Path:
    from ansible.parsing.vault import VaultLib, VaultSecret

    cipher = VaultLib([("default", VaultSecret(vault_password))]).encrypt(CANARY.encode()).decode()
    hv = inv / "host_vars" / "node01.yml"
    block = "".join(f"  {line}\n" for line in cipher.splitlines())
    hv.write_text(hv.read_text() + f"ansible_become_password: !vault |\n{block}")
    return inv


def test_a_wrong_or_missing_vault_password_exits_2_in_one_line(tmp_path):
    """Issue 18 item 8: the vault password is bad input (exit 2), never "unreachable, retry" (4);
    decided before any connection, so no lab is needed."""
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    _add_vault_password(inv, b"vault-pw")
    (tmp_path / "wrong").write_text("not-it\n")
    env = {k: v for k, v in os.environ.items() if k not in ("FABTUNE_BECOME_PASSWORD", "ANSIBLE_VAULT_PASSWORD_FILE")}
    for extra, needle in (({"ANSIBLE_VAULT_PASSWORD_FILE": str(tmp_path / "wrong")},
                           f"node01: {tmp_path / 'wrong'}: ANSIBLE_VAULT_PASSWORD_FILE: cannot decrypt "
                           "ansible_become_password with this vault password"),
                          ({}, "node01: ANSIBLE_VAULT_PASSWORD_FILE: unset: ansible_become_password is "
                               "vault-encrypted: set ANSIBLE_VAULT_PASSWORD_FILE")):
        res = _fabtune("plan", "-i", str(inv), "--limit", "node01", env={**env, **extra})
        errors = [line for line in res.stderr.splitlines() if not line.startswith("...")]
        assert res.returncode == 2 and len(errors) == 1 and errors[0].startswith(f"fabtune: error: {needle}"), \
            res.stderr
        assert CANARY not in res.stdout + res.stderr and "Traceback" not in res.stderr


@pytest.mark.lab
def test_become_password_from_ansible_vault(lab_inventory, tmp_path, monkeypatch):
    from tuning.targets.base import connection_facts
    from tuning.transport.ssh import SshHost

    privileges.require_password(lab_inventory / ".state", CANARY)
    inv = _add_vault_password(lab_inventory, b"vault-pw")
    dev = inventory.load(inv).devices["node01"]
    assert dev.connection.become_password_vault.startswith("$ANSIBLE_VAULT;1.1;AES256")
    assert CANARY not in repr(dev.connection) and CANARY not in str(connection_facts(dev.connection))
    # the journal keeps the ciphertext only (issue 18 item 5: a vault run is rolled back with the vault file)
    record = connection_facts(dev.connection)
    assert [k for k in record if "vault" in k or "pass" in k] == ["become_password_vault"]
    assert record["become_password_vault"] == dev.connection.become_password_vault
    monkeypatch.delenv("FABTUNE_BECOME_PASSWORD", raising=False)
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    with pytest.raises(InputError, match="vault-encrypted: set ANSIBLE_VAULT_PASSWORD_FILE") as err:
        SshHost("node01", dev.connection)
    assert err.value.exit_code == 2  # bad input, not an unreachable host (issue 18 item 8)
    (tmp_path / "wrong").write_text("not-it\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tmp_path / "wrong"))
    with pytest.raises(InputError, match="cannot decrypt ansible_become_password") as err:
        SshHost("node01", dev.connection)
    assert CANARY not in str(err.value) and err.value.exit_code == 2
    (tmp_path / "right").write_text("vault-pw\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tmp_path / "right"))
    from tuning.rollout.journal_check import validate
    from tuning.rollout.rollback import connect

    rec = {"role": "node", "platform": "linux", "connection": record}
    validate({"run_id": "r1", "inventory": str(inv), "mode": "apply", "stage": "done", "started": 1.0,
              "devices": {"node01": rec}}, tmp_path / "r1.json")
    # the live run's session, then a rollback's, opened from the journal record alone
    for host in (SshHost("node01", dev.connection), connect("node01", rec).host):
        try:
            res = host.run("id -u >/dev/null && sysctl -n net.core.rmem_max")
            assert (res.rc, res.stderr, res.command.startswith("sudo -S -p '' -u root -- ")) == (0, "", True)
        finally:
            host.close()
