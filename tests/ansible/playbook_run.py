"""Running the playbooks from tests: ``ansible-playbook`` of this venv, in the repository root,
with the result as data (exit code, output, the PLAY RECAP per host)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Played:
    """One playbook run: ``rc``, ``out`` (stdout + stderr), ``recap`` host -> {ok, changed, unreachable, failed}."""

    rc: int
    out: str
    recap: dict[str, dict[str, int]]

    def changed(self) -> dict[str, int]:
        """host -> changed count."""
        return {h: r["changed"] for h, r in self.recap.items()}


def play(inv: Path, playbook: str, *args: str, journal: Path | None = None, env: dict | None = None,
         timeout: float = 500) -> Played:
    """Run ``playbooks/<playbook>`` against ``inv`` (extra ``args`` as on the command line)."""
    cmd = [str(PLAYBOOK_BIN), "-i", str(inv), f"playbooks/{playbook}", *args]
    if journal is not None:
        cmd += ["-e", json.dumps({"fabtune_journal_dir": str(journal)})]
    full = {**os.environ, "PATH": f"{PLAYBOOK_BIN.parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", **(env or {})}
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=full)
    out = res.stdout + res.stderr
    recap = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
             for m in RECAP.findall(out)}
    return Played(res.returncode, out, recap)


def journals(journal: Path) -> list[dict]:
    """Every run journal in ``journal`` (oldest first)."""
    return [json.loads(p.read_text()) for p in sorted(journal.glob("*.json"))]
