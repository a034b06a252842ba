"""The commands that contact no device (``render``, ``plan --offline``) load no SSH library and no
fan-out framework (issue 24: about 0.4 s of every such run went to importing them), and still print
what they are for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

#: runs the CLI in-process, then names which of the session libraries got imported
PROBE = """
import sys
from tuning.cli import main
try:
    main()
except SystemExit:
    pass
print("loaded:", sorted(m for m in ("paramiko", "netmiko", "asyncssh", "nornir", "fakenos", "ansible_runner")
                        if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [("render", "-o", "{tmp}/out"), ("plan", "--offline")])
def test_offline_commands_load_no_session_library(args: tuple[str, ...], tmp_path: Path):
    argv = [a.format(tmp=tmp_path) for a in args] + ["-i", str(REPO / "inventory" / "example-su")]
    res = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert "loaded: []" in res.stderr, res.stderr[-2000:]
    if args[0] == "render":
        assert len(list((tmp_path / "out").iterdir())) == 44 and "wrote 44 file(s)" in res.stdout
    else:
        # 44 devices: over DETAIL_DEVICES, so one row per domain (tests/reports has the summary's own test)
        assert "summary of 2752 change(s) on 44 device(s), one row per domain" in res.stdout, res.stdout[-2000:]


def test_the_cli_does_not_import_every_parser_at_start():
    """``tuning.parsers`` imports its twenty-odd parser modules only for :func:`tuning.parsers.parse`
    (0.2 s of CPU of every ``fabtune`` command went to them); the registry is still complete."""
    probe = ("import sys; import tuning.cli; print(sorted(m for m in sys.modules if m.startswith('tuning.parsers.')));"
             "from tuning.parsers import REGISTRY; print(len(REGISTRY), 'ib_write_bw' in REGISTRY, 'nv-show-qos-roce' in REGISTRY)")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO)
    loaded, registry = res.stdout.splitlines()
    assert "'tuning.parsers.rdma'" not in loaded and "'tuning.parsers.sonic'" not in loaded, loaded
    count, *present = registry.split()
    assert int(count) >= 50 and present == ["True", "True"], registry
