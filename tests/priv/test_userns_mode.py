"""The lab run by a normal user (user-namespace mode, docs/lab.md) is as strict as the root lab:
the same refusals without sudo, the same results with it. As root this test drops to ``nobody``
with ``setpriv`` to start the lab; inside ``make test``'s user namespace it runs as it is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import TEST_BASE_PORT
from tuning.lab import privileges

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, shutil, subprocess, sys
from pathlib import Path
from tuning import inventory
from tuning.lab import controller
from tuning.lab.fabric import default_fabric, retarget_inventory
from tuning.transport.ssh import SshHost

base, port, repo = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
inv = base / "lab"
shutil.copytree(repo / "inventory" / "lab", inv, ignore=shutil.ignore_patterns(".state", ".fabtune.lock"))
fabric = default_fabric(base_port=port)
retarget_inventory(inv / "hosts.yaml", fabric)
controller.up(inv / ".state", fabric)
try:
    host = SshHost("node01", inventory.load(inv).devices["node01"].connection)
    out = []
    for cmd, privileged in json.loads(sys.argv[4]):
        r = host.run(cmd, privileged=privileged)
        out.append([r.rc, r.stdout, r.stderr])
    host.close()
    lab_cli = []  # lab commands that write the node trees, as this user
    for args in (["inject", "node03", "irqbalance"], ["inject", "node03", "clear"], ["reboot", "node04"]):
        r = subprocess.run([sys.executable, "-m", "tuning", "lab", *args, "-i", str(inv)], capture_output=True,
                           text=True, cwd=repo)
        lab_cli.append([r.returncode, r.stderr])
    print(json.dumps(out))
    print(json.dumps(lab_cli))
finally:
    controller.down(inv / ".state")
"""

RMEM = "sysroot/proc/sys/net/core/rmem_max"
COMMANDS = [
    (f"echo 1 > {RMEM}", False),
    ("sysctl -w net.core.rmem_max=1", False),
    ("cma_roce_tos -d mlx5_0 -t 106", False),
    ("grep CapEff /proc/self/status", False),
    (f"echo 7 > {RMEM} && cat {RMEM} && cma_roce_tos -d mlx5_0 -t 106", True),
]
EXPECTED = [
    [1, "", f"bash: line 1: {RMEM}: Permission denied\n"],
    [1, "", "sysctl: permission denied on key 'net.core.rmem_max'\n"],
    [1, "You must be root to run this\n", ""],
    [0, "CapEff:\t0000000000000000\n", ""],
    [0, "7\n106\n", ""],
]


def test_lab_of_a_normal_user_is_as_strict_as_the_root_lab():
    base = Path(tempfile.mkdtemp(prefix="fabtune-userns-"))
    try:
        argv = [sys.executable, "-c", CHILD, str(base), str(TEST_BASE_PORT), str(REPO), json.dumps(COMMANDS)]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(base)}
        if privileges.lab_user() is not None:  # real root: become a normal user (the lab then uses unshare)
            nobody = privileges.lab_user()
            os.chown(base, *nobody)
            argv = ["setpriv", f"--reuid={nobody[0]}", f"--regid={nobody[1]}", "--clear-groups", *argv]
        res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=240)
        assert res.returncode == 0, res.stderr[-3000:]
        assert json.loads(res.stdout.splitlines()[-2]) == EXPECTED
        lab_cli = json.loads(res.stdout.splitlines()[-1])
        if privileges.lab_user() is None:  # already root of a user namespace (make test): it may write them
            assert lab_cli == [[0, ""]] * 3
        else:  # a normal user outside the lab's namespace: one clear line, no traceback
            for (rc, err), what in zip(lab_cli, ["lab inject", None, "lab reboot"]):
                if what is None:
                    assert (rc, err) == (0, "")  # clear writes no node tree
                    continue
                assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
                assert err.startswith(f"fabtune: error: fabtune {what} must write ") and "read-only" in err, err
    finally:
        shutil.rmtree(base, ignore_errors=True)
