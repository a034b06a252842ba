"""The push's read back reads a ``cat FILE`` key with the shell's ``read`` builtin (no fork per file):
it must give exactly what ``o=$(cat FILE)`` gives, and fail where cat fails, for any file content,
under the shells a node may have (dash as ``sh``, bash). Generated contents, fixed seed."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from tuning import node
from tuning.node.base import ABSENT, cat_cmd

SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]
#: bytes a sysfs / procfs / config file may hold, the awkward ones over-weighted
ALPHABET = [b"\n", b"\r", b"\t", b"\f", b" ", b"\\", b"%s", b"'", b'"', b"$x", b"@@rb\t1\t0\t", b"@@rl\t0\t",
            b"\xff", b"\xc3\xa9", b"0", b"9", b"a", b"-", b","]


def _generated(rng: random.Random) -> bytes:
    return b"".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))


def _as_cat_gives(cmd: str) -> str:
    """What the former read back recorded for ``cmd``: ``$(cmd)``'s stdout, ABSENT when it failed."""
    r = subprocess.run(["bash", "-c", f"o=$({cmd} 2>/dev/null); rc=$?; printf '%s' \"$o\"; exit $rc"],
                       capture_output=True)
    return r.stdout.decode(errors="replace") if r.returncode == 0 else ABSENT


@pytest.mark.parametrize("shell", SHELLS)
def test_read_back_of_a_file_equals_cat_for_generated_contents(tmp_path: Path, shell: str) -> None:
    rng = random.Random(20261203)
    files = []
    for i in range(60):
        f = tmp_path / f"f {i}" if i % 7 == 0 else tmp_path / f"f{i}"  # a blank in the path: quoted by cat_cmd
        f.write_bytes(_generated(rng))
        files.append(f)
    (tmp_path / "folder").mkdir()
    files += [tmp_path / "missing", tmp_path / "folder"]  # cat fails on both: ABSENT, not ""
    reads = [cat_cmd("/", str(f)) for f in files] + [f"base64 -w0 {files[1]}", f"cat {files[1]} | tr a b"]
    out = subprocess.run([shell, "-c", node._readback_script(reads)], capture_output=True).stdout
    got = node._read_back(out.decode(errors="replace"), reads)
    want = {c: _as_cat_gives(c) for c in reads}
    assert [(c, got.get(c), want[c]) for c in reads if got.get(c) != want[c]] == []
    assert got[cat_cmd("/", str(tmp_path / "missing"))] == ABSENT
    assert got[cat_cmd("/", str(tmp_path / "folder"))] == ABSENT


def test_only_a_plain_cat_of_one_quoted_file_is_read_in_the_shell() -> None:
    assert node._cat_file(cat_cmd("/", "/proc/irq/110/smp_affinity_list")) == "/proc/irq/110/smp_affinity_list"
    assert node._cat_file(cat_cmd("sysroot", "/a b")) == "sysroot/a b"
    for cmd in ("cat a b", "cat a | tr a b", "cat a 2>/dev/null", "cat 'a", "test -L a", "cat", "catx a"):
        assert node._cat_file(cmd) is None, cmd
