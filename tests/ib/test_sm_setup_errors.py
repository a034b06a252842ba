"""An SM Target on a host that cannot run the IB diagnostics is a setup error (exit 2), never a
device's failure (exit 1): infiniband-diags missing (the shell's 127), or libibmad finding no port
to open (no HCA or ib_umad there). The refusal's text is real: ``cases/iblinkinfo__no_umad_port.stderr.txt``
is infiniband-diags 3.x's iblinkinfo (Debian 12) on a host without ``/sys/class/infiniband_mad``, exit 1."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import yaml

from tuning import inventory
from tuning.burnin import ib_read
from tuning.errors import SetupError
from tuning.lab.ib import SM_PATHS
from tuning.targets.sm import SmTarget
from tuning.transport.local import LocalHost

CASES = Path(__file__).parent / "cases"


def _target(tmp_path: Path, bin_dir: Path) -> SmTarget:
    inv = tmp_path / "inv"
    (inv / "host_vars").mkdir(parents=True)
    hosts = {"sm01": {"ansible_host": "127.0.0.1", "fabtune_sysroot": str(tmp_path), "fabtune_local": True}}
    (inv / "hosts.yaml").write_text(yaml.safe_dump({"all": {"children": {"subnet_managers": {"hosts": hosts}}}}))
    (inv / "host_vars" / "sm01.yml").write_text(yaml.safe_dump(dict(SM_PATHS), sort_keys=False))
    dev = inventory.load(inv).devices["sm01"]
    host = LocalHost("sm01", env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"})
    return SmTarget(dev.name, dev.connection, dev.spec.platform, device=dev, host=host)


@pytest.mark.parametrize("stub, says", [
    (f"cat '{CASES / 'iblinkinfo__no_umad_port.stderr.txt'}' >&2; exit 1",
     "sm01: iblinkinfo finds no InfiniBand port to query (can't read ABI version from "
     "/sys/class/infiniband_mad/abi_version (No such file or directory): is ib_umad module loaded?): the SM Target "
     "runs on the host of OpenSM and its HCA (ib_umad loaded), or on the IB lab's"),
    (None, "sm01: iblinkinfo is not installed there (infiniband-diags)")], ids=["no-umad-port", "not-installed"])
def test_an_sm_host_without_the_ib_tools_or_a_port_is_a_setup_error(tmp_path: Path, stub, says):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if stub:
        (bin_dir / "iblinkinfo").write_text(f"#!/bin/sh\n{stub}\n")
        (bin_dir / "iblinkinfo").chmod(0o755)
    t = _target(tmp_path, bin_dir)
    with pytest.raises(SetupError) as e:
        t.collect()
    assert str(e.value).startswith(says), str(e.value)
    assert e.value.exit_code == 2
    with pytest.raises(SetupError) as e:  # the burn-in's read takes the same path (SmTarget.run_diag)
        ib_read.read_fabric(t)
    assert str(e.value).startswith(says) and e.value.exit_code == 2, str(e.value)


def test_the_burn_in_reads_the_ib_fabric_through_the_sm_targets_public_documented_read():
    """``tuning/burnin/ib_read.py`` uses only public, documented members of the SM Target it is given
    (it called the private ``SmTarget._run``)."""
    tree = ast.parse(Path(ib_read.__file__).read_text())
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "sm"}
    assert used == {"run_diag", "close"} and all(getattr(SmTarget, a).__doc__ for a in used)
    assert "infiniband-diags read" in SmTarget.run_diag.__doc__
