"""Report and render files are never written through a link or onto a special file (issue 19).

Tests run as root in CI: a rename onto ``/dev/null`` would turn it into a regular file, a rename onto
a link would replace the link. Refused when the flag is parsed (before any run: one line, exit 2),
and again when written (a link or a FIFO that appears meanwhile is left alone)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.adversarial._cli import assert_one_line, cli
from tests.conftest import REPO
from tuning.outfile import append, refusal, write_atomic

EXAMPLE = str(REPO / "inventory" / "example-su")


def _image(path: Path) -> tuple:
    """What a special file or link is, to compare before and after (kind, device, target, bytes)."""
    st = os.lstat(path)
    target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
    data = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
    return stat.S_IFMT(st.st_mode), st.st_rdev, target, data


@pytest.fixture()
def specials(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a link to a regular file, a dangling link and /dev/null."""
    (tmp_path / "kept.xml").write_text("someone else's file\n")
    os.mkfifo(tmp_path / "fifo.prom")
    (tmp_path / "link.xml").symlink_to(tmp_path / "kept.xml")
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    return {"fifo": tmp_path / "fifo.prom", "link": tmp_path / "link.xml",
            "dangling": tmp_path / "dangling.json", "null": Path("/dev/null")}


@pytest.mark.parametrize("flag,which,why", [
    ("--report-json", "null", "is a character device, not a regular file"),
    ("--junit", "link", "is a symbolic link (fabtune writes no file through a link)"),
    ("--prom-file", "fifo", "is a FIFO, not a regular file"),
    ("--report-json", "dangling", "is a symbolic link"),
])
def test_a_report_flag_onto_a_special_file_or_link_is_refused_before_the_run(specials, flag, which, why):
    target, kept = specials[which], specials["link"].parent / "kept.xml"
    before, kept_before = _image(target), kept.read_bytes()
    code, out, err = cli("plan", "-i", EXAMPLE, "--offline", flag, str(target))
    assert_one_line(code, err)
    assert err.startswith(f"fabtune: error: {flag}: '") and f"': {why}" in err, err  # long paths are shortened
    assert _image(target) == before and kept.read_bytes() == kept_before
    assert not list(target.parent.glob(".*.tmp"))


def test_the_burnin_html_report_onto_a_fifo_is_refused(specials):
    code, _, err = cli("burnin", "-i", EXAMPLE, "--iterations", "1", "--html", str(specials["fifo"]))
    assert_one_line(code, err, "--html", "is a FIFO, not a regular file")


def test_the_writer_refuses_what_appeared_after_the_flag_was_checked(tmp_path: Path, specials):
    for name in ("fifo", "link", "dangling", "null"):
        before = _image(specials[name])
        with pytest.raises(OSError) as e:
            write_atomic(specials[name], b"report\n")
        assert e.value.strerror == refusal(specials[name]) and _image(specials[name]) == before
    assert not list(tmp_path.glob(".*.tmp"))
    out = tmp_path / "r.json"
    write_atomic(out, b"one\n")
    write_atomic(out, b"two\n")  # a regular file is replaced
    assert out.read_bytes() == b"two\n" and stat.S_IMODE(out.stat().st_mode) == 0o644
    assert refusal(out) is None and refusal(tmp_path / "missing") is None
    assert refusal(tmp_path) == "is a directory, not a regular file; give a file name"


def test_render_leaves_a_link_in_its_output_folder_alone(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("not fabtune's\n")
    (out / "su1-leaf-r0.nvue").symlink_to(victim)
    code, _, err = cli("render", "-i", EXAMPLE, "-o", str(out))
    assert "Traceback" not in err and code != 0, (code, err)
    assert "su1-leaf-r0.nvue" in err and "symbolic link" in err and err.count("\n") == 1, err
    assert victim.read_text() == "not fabtune's\n" and (out / "su1-leaf-r0.nvue").is_symlink()


def test_a_log_is_appended_to_a_regular_file_only(tmp_path: Path, specials):
    for name in ("fifo", "link", "dangling"):
        before = _image(specials[name])
        with pytest.raises(OSError) as e:
            append(specials[name], "scontrol update NodeName=node01 State=DRAIN\n")
        assert e.value.strerror == refusal(specials[name]) and _image(specials[name]) == before
    log = tmp_path / "drain.log"
    append(log, "one\n")
    append(log, "two\n")
    assert log.read_text() == "one\ntwo\n"
    code, _, err = cli("burnin", "-i", EXAMPLE, "--iterations", "1", "--drain-log", str(specials["link"]))
    assert_one_line(code, err, "--drain-log", "is a symbolic link")
