"""``fabtune rollout --engine ansible`` (tuning/ansible_engine.py) against the Nornir engine,
over real SSH on two fresh labs (one per engine, same fabric, own ports):

- a regression (mtu + sysctl alone leave the leaf pairs under the 300 Gb/s pass mark, serial 2):
  the Ansible engine exits 1, batch 1 is restored, batch 2 never pushed, and every lab byte is back;
- the same rollout judged by ``--min-bw 250`` (kept), once per engine: both exit 0, both labs end
  byte for byte alike, and the JSON report, the JUnit XML and the Prometheus textfile are the same
  document but for the run id, the times and the inventory path;
- a node that does not answer (its port closed): both engines refuse the rollout before any push, exit 4;
- flags the Ansible engine cannot honour are refused with one line, exit 2, nothing run.
- a batch the Ansible gate rebuilds from the journal is still the last one, and re-measures the same
  pairs as the engine's last batch (no lab).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import running_lab, snapshot_fabric

pytestmark = [pytest.mark.ansible, pytest.mark.lab]

REPO = Path(__file__).resolve().parents[2]
#: what differs between two runs of the same work: ids, clocks, the inventory's path
VOLATILE = {"run_id", "started", "finished", "seconds", "inventory", "generator"}
ROLLOUT = ("--domain", "mtu", "--domain", "sysctl", "--serial", "2", "--batch-by", "none", "--no-incast")


@pytest.fixture(scope="module")
def labs(tmp_path_factory):
    """Two fresh labs (nornir, ansible) and the untuned snapshot (the same for both)."""
    with running_lab(tmp_path_factory.mktemp("nornir")) as a, \
            running_lab(tmp_path_factory.mktemp("ansible")) as b:
        untuned = snapshot_fabric(a)
        assert snapshot_fabric(b) == untuned
        yield a, b, untuned


def fabtune(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``fabtune ARGS`` as a user runs it (a new process), from the repository root."""
    return subprocess.run([sys.executable, "-m", "tuning", *args], capture_output=True, text=True, cwd=REPO,
                          env=env or dict(os.environ), timeout=900)


def rollout(inv: Path, out: Path, engine: str, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """One rollout of :data:`ROLLOUT` with every report; returns the process and its report folder."""
    out.mkdir()
    res = fabtune("rollout", "-i", str(inv), *ROLLOUT, *extra, "--engine", engine, "--journal-dir", str(out / "j"),
                  "--report-json", str(out / "run.json"), "--junit", str(out / "run.xml"),
                  "--prom-file", str(out / "run.prom"))
    return res, out


def stable(doc: object) -> object:
    """``doc`` without :data:`VOLATILE` keys (at any depth)."""
    if isinstance(doc, dict):
        return {k: stable(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [stable(v) for v in doc]
    return doc


def differences(a: object, b: object, path: str = "") -> list[str]:
    """Paths where ``a`` and ``b`` differ (for a readable failure), at most one per list element."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in (differences(a.get(k), b.get(k), f"{path}/{k}") if k in a and k in b
                          else [f"{path}/{k}: only in {'nornir' if k in b else 'ansible'}"])]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {str(a)[:120]} != {str(b)[:120]}"]


def scrub(text: str, run_id: str, inv: Path) -> str:
    """A JUnit or Prometheus text without its run id, inventory path and clock values."""
    text = text.replace(run_id, "RUN").replace(str(inv.resolve()), "INV")
    text = re.sub(r'(timestamp|time)="[^"]*"', r'\1=""', text)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z?", "T", text)
    # clock metrics of tuning/reports/prom.py (fabtune_run_duration_seconds, fabtune_run_end_timestamp_seconds)
    return re.sub(r"^(fabtune_run_(?:(?:duration|end_timestamp|timestamp|started|finished)_)?seconds\S*) .*$",
                  r"\1 X", text, flags=re.M)


def test_unsupported_flags_are_refused_with_one_line(labs, tmp_path: Path) -> None:
    _, inv, untuned = labs
    for flag, value in (("--rail", "1"), ("--batch-by", "leaf")):
        res = fabtune("rollout", "-i", str(inv), "--engine", "ansible", flag, value,
                      "--journal-dir", str(tmp_path / "j"))
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.strip().count("\n") == 0 and f"{flag}: " in res.stderr
        assert "not supported by --engine ansible" in res.stderr
    bad = fabtune("rollout", "-i", str(inv), "--engine", "puppet")
    assert bad.returncode == 2 and "allowed: nornir, ansible" in bad.stderr
    assert snapshot_fabric(inv) == untuned and not (tmp_path / "j").exists()


def test_a_regression_exits_1_and_restores_every_byte(labs, tmp_path: Path) -> None:
    _, inv, untuned = labs
    res, out = rollout(inv, tmp_path / "regress", "ansible")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads((out / "run.json").read_text())
    assert (doc["outcome"], doc["exit_code"], doc["command"]) == ("rolled-back", 1, "rollout")
    assert [b["outcome"] for b in doc["batches"]] == ["restored", "not-run"]
    assert doc["batches"][0]["nodes"] == ["node01", "node02"] and doc["batches"][0]["verify_ok"] is False
    assert sorted(doc["restored"]) == ["node01", "node02"]
    journal = json.loads((out / "j" / f"{doc['run_id']}.json").read_text())
    assert doc["restored_verified"] is True, [(r["pair"], r["status"], r.get("error"), r["reasons"])
                                              for r in journal["verify"].get("restored") or [] if r["status"] != "pass"]
    assert sorted(doc["not_run"]) == ["node03", "node04"]
    assert "ROLLED BACK" in res.stdout and doc["run_id"] in res.stdout
    assert snapshot_fabric(inv) == untuned  # every node file and switch config, byte for byte
    again = fabtune("report", doc["run_id"], "--journal-dir", str(out / "j"), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["outcome"] == "rolled-back"


def test_an_unreachable_node_exits_4_before_any_push_as_with_nornir(labs, tmp_path: Path) -> None:
    """node04's port closed (a copy of each lab's inventory, the lab state shared): a verified rollout
    cannot measure node04's pairs, so both engines refuse it before any push with node04's
    ConnectError, exit 4, and the Ansible engine journals nothing. Runs before the kept rollouts:
    both labs must stay untuned."""
    from tests.reports.test_reports_lab import _node04_unreachable

    docs = {}
    for name, inv in zip(("nornir", "ansible"), labs[:2]):
        res, out = rollout(_node04_unreachable(inv), tmp_path / name, name)
        assert res.returncode == 4, res.stdout[-3000:] + res.stderr[-3000:]
        docs[name] = json.loads((out / "run.json").read_text())
        assert "node04" in res.stderr and snapshot_fabric(inv) == labs[2]
    for doc in docs.values():
        assert (doc["exit_code"], doc["outcome"], doc["command"]) == (4, "unreachable", "rollout"), doc
        assert (doc["error"]["type"], doc["error"]["host"]) == ("ConnectError", "node04"), doc["error"]
    assert not list((tmp_path / "ansible" / "j").glob("*.json"))  # refused before the journal


def test_both_engines_keep_the_same_rollout_with_the_same_report(labs, tmp_path: Path) -> None:
    nornir_inv, ansible_inv, untuned = labs
    assert snapshot_fabric(ansible_inv) == untuned  # the regression test left it untuned
    n_res, n_out = rollout(nornir_inv, tmp_path / "nornir", "nornir", "--min-bw", "250")
    a_res, a_out = rollout(ansible_inv, tmp_path / "ansible", "ansible", "--min-bw", "250")
    assert n_res.returncode == 0, n_res.stdout[-3000:] + n_res.stderr[-3000:]
    assert a_res.returncode == 0, a_res.stdout[-3000:] + a_res.stderr[-3000:]
    tuned = snapshot_fabric(nornir_inv)
    assert tuned != untuned and snapshot_fabric(ansible_inv) == tuned  # same changes, byte for byte
    n_doc, a_doc = (json.loads((o / "run.json").read_text()) for o in (n_out, a_out))
    assert a_doc["outcome"] == n_doc["outcome"] == "kept"
    assert [b["nodes"] for b in a_doc["batches"]] == [["node01", "node02"], ["node03", "node04"]]
    assert stable(a_doc) == stable(n_doc), differences(stable(a_doc), stable(n_doc))[:20]
    for name in ("run.xml", "run.prom"):
        texts = [scrub((o / name).read_text(), d["run_id"], inv)
                 for o, d, inv in ((n_out, n_doc, nornir_inv), (a_out, a_doc, ansible_inv))]
        assert texts[0] == texts[1], name
    # the table the user reads: same lines but for the run id and the duration
    strip = lambda s, d: re.sub(r" in [\d.]+ s$", "", s.replace(d["run_id"], "RUN"), flags=re.M)  # noqa: E731
    assert strip(a_res.stdout, a_doc) == strip(n_res.stdout, n_doc)
    # the Ansible run's journal says so; `fabtune report` prints it again from the journal alone
    journal = json.loads((a_out / "j" / f"{a_doc['run_id']}.json").read_text())
    assert journal["engine"] == "ansible"
    again = fabtune("report", a_doc["run_id"], "--journal-dir", str(a_out / "j"), "--json")
    assert again.returncode == 0 and stable(json.loads(again.stdout))["changes"] == stable(a_doc)["changes"]


def test_the_play_env_drops_secrets_and_keeps_paths() -> None:
    from tuning.ansible_engine import play_env

    env = play_env({"FABTUNE_BECOME_PASSWORD": "s1", "SITE_API_TOKEN": "s2", "ANSIBLE_VAULT_PASSWORD_FILE": "/p",
                    "HOME": "/h", "PATH": "/usr/bin"})
    assert "FABTUNE_BECOME_PASSWORD" not in env and "SITE_API_TOKEN" not in env
    assert (env["ANSIBLE_VAULT_PASSWORD_FILE"], env["HOME"]) == ("/p", "/h")
    assert env["PATH"].split(os.pathsep)[:2] == [str(Path(sys.executable).parent), "/usr/bin"]


def test_a_become_password_travels_as_a_one_time_vault_value(tmp_path: Path) -> None:
    from ansible.parsing.vault import VaultLib, VaultSecret

    from tuning.ansible_engine import VAULT_ID, become_vault

    assert become_vault(tmp_path, None) == (None, None) and not list(tmp_path.iterdir())
    cmdline, answers = become_vault(tmp_path, "pw-7d1c")
    text = (tmp_path / "become.yml").read_text()
    assert "pw-7d1c" not in text and "pw-7d1c" not in cmdline and (tmp_path / "become.yml").stat().st_mode & 0o077 == 0
    assert cmdline.endswith(f"--vault-id {VAULT_ID}@prompt")
    [(pattern, one_time)] = answers.items()
    assert re.search(pattern, f"Vault password ({VAULT_ID}): ", re.M)  # ansible-core's PromptVaultSecret prompt
    cipher = "\n".join(line.strip() for line in text.splitlines()[1:])
    assert VaultLib([(VAULT_ID, VaultSecret(one_time.encode()))]).decrypt(cipher) == b"pw-7d1c"


def test_the_policy_reaches_the_play_whole() -> None:
    from tuning.model.policy import RolloutPolicy
    from tuning.ansible_engine import AnsibleRun, extra_vars

    policy = RolloutPolicy().override(serial=[1, "50%"], max_failed_devices=2, settle_s=5, min_bw_gbps=250.0)
    ev = extra_vars(AnsibleRun(Path("inv"), policy, confirm_s=900, run_id="20261130T101500-1a2b3c"))
    assert RolloutPolicy.model_validate(json.loads(json.dumps(ev["fabtune_rollout"]))) == policy
    assert (ev["fabtune_serial"], ev["fabtune_max_fail_percentage"], ev["fabtune_confirm_s"]) == ([1, "50%"], 0, 900)
    assert ev["fabtune_run_id"] == "20261130T101500-1a2b3c" and Path(ev["fabtune_journal_dir"]).is_absolute()


def test_a_batch_rebuilt_from_the_journal_is_the_last_one_and_measures_the_missing_pairs() -> None:
    """The Ansible gate rebuilds each batch from the journal (a new object, tuning/rollout/steps_verify.py):
    the last batch is still known as last, and re-measures the spine pairs batch 1 measured while
    node03/node04 were untuned, as the engine's own last batch (serial 2 on the lab)."""
    from tuning import inventory
    from tuning.model.policy import RolloutPolicy
    from tuning.rollout import engine
    from tuning.rollout.batch_run import Measured, batch_verify_pairs, is_last, pair_devices
    from tuning.rollout.batches import Batch, plan_batches

    inv = inventory.load(REPO / "inventory" / "lab")
    policy = RolloutPolicy(serial=[2])
    batches = plan_batches(inv, inv.nodes, policy)
    r = engine.Run("x", engine.verify_pairs(inv, None), None, policy, batches, changed={d.name for d in inv.nodes})
    r.batch_pairs = {b.index: engine.verify_pairs(inv, None, b.devices) for b in batches}
    for p in r.batch_pairs[1]:  # batch 1 judged its pairs with an untuned end on regression only
        r.pair_devs[p.name] = pair_devices(p)
        r.measured.append(Measured(1, {"pair": p.name}, {p.client, p.server} <= {"node01", "node02"}))
    rebuilt = Batch(**batches[-1].as_dict())
    assert rebuilt is not batches[-1] and is_last(r, rebuilt) and not is_last(r, Batch(**batches[0].as_dict()))
    said: list[str] = []
    names = [p.name for p in batch_verify_pairs(r, rebuilt, said.append)]
    assert names == [p.name for p in batch_verify_pairs(r, batches[-1], lambda m: None)]
    own = {p.name for p in r.batch_pairs[2]}
    assert {n for n in names if n not in own} == {"node01:mlx5_0->node03:mlx5_1", "node02:mlx5_1->node04:mlx5_0"}
    assert said and "also measuring 2 pair(s)" in said[0]


def test_the_overwrite_permission_reaches_the_play_and_each_switch_it_pushes(tmp_path: Path) -> None:
    """``--allow-overwrite-files`` (issue 21, NVUE's files-changed warning) travels as the extra var
    ``fabtune_allow_overwrite_files`` into the plugins' StepOptions and onto a switch's Target only."""
    from ansible.errors import AnsibleActionFail

    from tuning import inventory
    from tuning.ansible_engine import AnsibleRun, extra_vars
    from tuning.model.policy import RolloutPolicy
    from tuning.rollout.session import permit_overwrite
    from tuning.targets import target_for

    ev = extra_vars(AnsibleRun(Path("inv"), RolloutPolicy(), allow_overwrite_files=True))
    assert ev["fabtune_allow_overwrite_files"] is True
    assert extra_vars(AnsibleRun(Path("inv"), RolloutPolicy()))["fabtune_allow_overwrite_files"] is False
    sys.path.insert(0, str(REPO / "playbooks" / "action_plugins"))
    try:
        import _fabtune_common as common
    finally:
        sys.path.pop(0)
    opts = common.step_options({**ev, "fabtune_journal_dir": str(tmp_path / "j")}, False, None)
    assert opts.allow_overwrite_files is True
    with pytest.raises(AnsibleActionFail, match="fabtune_allow_overwrite_files"):
        common.step_options({"fabtune_allow_overwrite_files": "maybe", "fabtune_journal_dir": str(tmp_path / "j")},
                            False, None)
    inv = inventory.load(REPO / "inventory" / "lab")
    switch, node = target_for(inv.devices["leaf01"]), target_for(inv.devices["node01"])
    assert permit_overwrite(switch, True).allow_overwrite_files is True
    assert not hasattr(permit_overwrite(node, True), "allow_overwrite_files")
