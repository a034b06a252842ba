"""The Kubernetes lab of this folder's lab tests (issue 23): ``fabtune lab up --k8s`` (the API server
stand-in with the Maintenance Operator's part, one ``fabtune k8s agent`` per node, each on its node's
sysroot) beside a 2-node lab, one per test module. Needs no root.

Ports: 150 into this process's own test port range (:func:`tests.slurm.conftest._base_port`
gives +50 to the Slurm lab): nodes +1..+2, switches +101..+103, the API server after the Slurm
lab's range (+143, ``tuning.lab.k8s.port``), all below the pool's +300.
"""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from tests.slurm.conftest import _base_port, fab
from tuning.lab import k8s


def admin(inv, method: str, path: str, body: dict | None = None) -> dict:
    """One request to the lab's API server as ``system:admin`` (a person with kubectl); its JSON
    answer, a refusal's Status included."""
    base = inv / ".state" / k8s.FOLDER
    conf = json.loads((base / "lab.json").read_text())
    req = urllib.request.Request(f"http://127.0.0.1:{conf['port']}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {(base / 'admin.token').read_text().strip()}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


@pytest.fixture(scope="module")
def k8s_lab(tmp_path_factory):
    """``(inventory, controller env, journal dir)`` of a running 2-node lab with its Kubernetes part."""
    base = _base_port()
    inv = tmp_path_factory.mktemp("k8s") / "lab2"
    procs: dict[str, int] = {}
    try:
        r = fab("lab", "init", str(inv), "--nodes", "2", "--base-port", str(base + 100))
        assert r.returncode == 0, r.stderr
        r = fab("lab", "up", "-i", str(inv), "--k8s")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "FABTUNE_K8S_SERVER=http://127.0.0.1:" in r.stdout
        procs = k8s.running(inv / ".state")
        assert sorted(procs) == ["agent node01", "agent node02", "apiserver"]
        env = {**os.environ, **k8s.client_env(inv / ".state")}
        yield inv, env, k8s.folder(inv / ".state") / k8s.JOURNAL
    finally:
        r = fab("lab", "down", "-i", str(inv))
    left = [pid for pid in procs.values() if k8s.runs(pid)]
    assert r.returncode == 0 and not left, f"left running after lab down: {left} of {procs}"
