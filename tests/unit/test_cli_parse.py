"""`fabtune parse`: exit 0 with JSON for a readable output (a classified tool error included),
exit 2 with ONE line naming the problem for empty, binary, truncated or wrong-tool input."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.adversarial._cli import cli


def _parse(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """``fabtune parse ARGS`` run in this process (:func:`tests.adversarial._cli.cli`), as a finished process."""
    code, out, err = cli("parse", *args, stdin=stdin)
    return subprocess.CompletedProcess(["fabtune", "parse", *args], code, out.encode(), err.encode())


def test_parse_real_sample_gives_gbps(cases_dir: Path):
    res = _parse("ib_write_bw", str(cases_dir / "ib_write_bw__roce_client_MiBsec_new_perftest.txt"))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    row = doc["bw_rows"][0]
    assert row["size_bytes"] == 65536
    assert round(row["bw_avg"]["value"], 1) == 381.1 and row["bw_avg"]["unit"] == "MiB/sec"
    assert doc["gid_index"] == 3


def test_parse_classified_tool_error_exits_0(cases_dir: Path):
    res = _parse("ib_write_bw", str(cases_dir / "ib_write_bw__client_err_modify_qp_rtr.txt"))
    assert res.returncode == 0
    doc = json.loads(res.stdout)
    assert doc["failure"]["kind"] in ("qp_rtr_failed", "gid_type_mismatch") and doc["bw_rows"] == []


def test_parse_table_format_from_stdin(cases_dir: Path):
    data = (cases_dir / "mlnx_qos__legacy_trust_dscp_pfc3_tsa_vendor.txt").read_bytes()
    res = _parse("mlnx_qos", "-", "--format", "table", stdin=data)
    assert res.returncode == 0
    assert "dscp" in res.stdout.decode()


def test_unreadable_inputs_exit_2_with_one_line(tmp_path: Path, cases_dir: Path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    binary = tmp_path / "bin.dat"
    binary.write_bytes(bytes(range(256)) * 4)
    sample = (cases_dir / "ib_write_bw__roce_client_MiBsec_new_perftest.txt").read_text()
    truncated = tmp_path / "trunc.txt"
    truncated.write_text(sample.split(" 65536 ")[0])
    cases = {"empty": ("ib_write_bw", empty), "binary": ("ib_write_bw", binary),
             "truncated": ("ib_write_bw", truncated),
             "wrong tool": ("ib_write_bw", cases_dir / "mlnx_qos__legacy_trust_dscp_pfc3_tsa_vendor.txt"),
             "unknown tool": ("ib_frob_bw", empty), "missing file": ("ib_write_bw", tmp_path / "nope")}
    for name, (tool, path) in cases.items():
        res = _parse(tool, str(path))
        lines = res.stderr.decode().strip().splitlines()
        assert res.returncode == 2, (name, res.stderr)
        assert len(lines) == 1 and lines[0].startswith("fabtune: error:"), (name, lines)
        assert res.stdout == b"", name


def test_interrupts_context_options_give_the_finding(cases_dir: Path):
    path = str(cases_dir / "proc_interrupts__32cpu_mlx5_msix_irqs_on_remote_numa.txt")
    res = _parse("interrupts", path, "--bdf", "0000:c1:00.0", "--local-cpus", "16-31")
    assert res.returncode == 0, res.stderr
    [f] = json.loads(res.stdout)["findings"]
    assert (f["code"], f["subject"]) == ("irq_remote_numa", "0000:c1:00.0")
    res = _parse("interrupts", path, "--context", "bdf=0000:c1:00.0", "--context", "local_cpus=0-15", "--format", "table")
    assert res.returncode == 0 and "irq_remote_numa" not in res.stdout.decode()


def test_context_for_queues_and_bad_context_exit_2(cases_dir: Path):
    path = str(cases_dir / "sonic_show_queue_counters__lossless_uc3_drops.txt")
    res = _parse("sonic-queue-counters", path, "--context", "lossless_queues=4")
    assert res.returncode == 0 and json.loads(res.stdout)["findings"] == []
    for args in (("--context", "nokey"), ("--bdf", "0000:c1:00.0"), ("--context", "lossless_queues=12")):
        res = _parse("sonic-queue-counters", path, *args)
        lines = res.stderr.decode().strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("fabtune: error:"), (args, lines)


def test_mlxconfig_set_transcript_from_stdin():
    text = ("Device #1:\n----------\n\nDevice type:    ConnectX5\nDevice:         0000:02:00.1\n\n"
            "Configurations:                              Next Boot       New\n"
            "         ROCE_CONTROL                        DEVICE_DEFAULT(0) ROCE_ENABLE(2)\n\n"
            " Apply new Configuration? (y/n) [n] : y\nApplying... Done!\n"
            "-I- Please reboot machine to load new configurations.\n")
    res = _parse("mlxconfig", "-", stdin=text.encode())
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["command"], doc["applied"], doc["findings"][0]["code"]) == ("set", True, "mlxconfig_pending_reset")


def test_parse_help_lists_only_registered_tools():
    import re

    from tuning.cli import parse_cmd
    from tuning.parsers import REGISTRY

    listed = set(re.search(r"Tools: (.*?)\.\n", parse_cmd.__doc__, re.S).group(1).split())
    assert listed <= set(REGISTRY)
    assert {"ib_write_bw", "mlnx_qos", "nv-show-qos-roce", "interrupts"} <= listed
    # every parser has a name in the help (others are its aliases): the IB tools were parsed, not listed
    unlisted = [sorted(n for n, f in REGISTRY.items() if f is fn) for fn in set(REGISTRY.values())
                if not any(REGISTRY[n] is fn for n in listed)]
    assert unlisted == []


def test_version_prints_the_package_version_and_exits_0():
    from tuning import __version__

    res = subprocess.run([sys.executable, "-m", "tuning", "--version"], capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"fabtune {__version__}\n", "")


def test_shell_completion_completes_commands_subcommands_and_flags():
    """typer's completion (issue 19): ``fabtune --show-completion`` (from bash) prints the script, which
    asks fabtune itself (``_FABTUNE_COMPLETE=complete_bash``) for the words."""
    exe = str(Path(sys.executable).with_name("fabtune"))
    # typer names the shell it runs under (shellingham reads the parent process): run it from bash,
    # as an operator's terminal would (make runs its recipes under sh, which typer does not serve)
    res = subprocess.run(["bash", "-c", f"{shlex.quote(exe)} --show-completion; true"], capture_output=True,
                         text=True, timeout=60)
    assert "complete -o default -F _fabtune_completion fabtune" in res.stdout, res

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_FABTUNE_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split(" ")) - 1)}
        return subprocess.run([exe], capture_output=True, text=True, timeout=60, env=env).stdout.split()

    assert complete("fabtune rol") == ["rollout", "rollback"]
    assert complete("fabtune lab re") == ["reboot", "reset"]
    assert complete("fabtune rollout --on") == ["--on-regression"]


def test_json_commands_print_an_error_document_when_they_fail_before_their_own(tmp_path):
    """issue 21's tryout: ``lint --json`` printed nothing on stdout when the load failed. Every
    ``--json`` command that fails before it has a document prints the error as one (stderr keeps
    its one line)."""
    inv = tmp_path / "inv"
    inv.mkdir()
    (inv / "hosts.yaml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        node01:\n"
                                    "          ansible_port: 70000\n")
    for argv, kind, needle in ((["lint", "-i", str(inv), "--offline", "--json"], "InputError", "node01"),
                               (["plan", "-i", str(inv), "--offline", "--bogus", "--json"], "UsageError", "--bogus"),
                               (["verify", "-i", str(inv), "--json"], "InputError", "node01")):
        res = subprocess.run([sys.executable, "-m", "tuning", *argv], capture_output=True, text=True, timeout=60)
        doc = json.loads(res.stdout)
        assert (res.returncode, doc["exit_code"], doc["outcome"], doc["error"]["type"]) == (2, 2, "error", kind), res
        assert doc["command"] == argv[0]
        assert needle in doc["error"]["message"] and res.stderr.count("\n") == 1
        assert res.stderr == f"fabtune: error: {doc['error']['message']}\n"
    res = subprocess.run([sys.executable, "-m", "tuning", "lint", "-i", str(inv), "--offline"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""  # without --json: the one stderr line only
