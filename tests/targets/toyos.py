"""A toy switch OS, registered from the test folder only: a driver (:class:`ToyDriver`), its template
(``toyos_switch.j2``), its diff reader (:meth:`ToyDriver.config_settings`, :meth:`ToyDriver.diff_changes`,
:meth:`ToyDriver.change_tags`) and its lab stand-in (:class:`ToyDevice`). Proves that a new switch OS
needs no edit under ``tuning/rollout`` (issue "One device contract").

The toy OS: a configuration is lines ``hostname NAME``, ``mtu PORT BYTES`` (552..9216) and ``lossless
on|off``; every commit is a numbered revision; a commit may wait for a confirm and goes back to its
parent when the window runs out; a diff prints ``- old`` / ``+ new`` lines. Its refusals are its own
texts (``% Invalid input``, ``% Commit refused``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import jinja2

from tuning.errors import CandidateError, CommitConfirmError, CommitError, ConnectError, RollbackError
from tuning.model.tags import lossless_tags, mtu_tags
from tuning.switch.base import Capabilities, RoceState, SwitchDriver, SwitchState

PLATFORM = "toyos"
POWER_ON = "hostname {name}\nmtu swp1 1500\nmtu swp2 1500\nlossless off\n"
_LINE = re.compile(r"hostname [a-z0-9-]{1,63}|mtu swp\d{1,3} \d{1,5}|lossless (on|off)")


class ToyDevice:
    """The lab stand-in of one toy switch: a folder holding its revisions (``revs/N.conf``), the
    applied one and its parent, a pending confirm (``pending``: revision and deadline), the staged
    candidate and its faults (``faults``: ``clamp-mtu N``: ports run at most N bytes whatever the
    configuration says; ``refuse-commit``)."""

    def __init__(self, root: Path):
        self.root = root

    @classmethod
    def power_on(cls, root: Path, name: str) -> "ToyDevice":
        """A toy switch at revision 1, every port at MTU 1500, lossless off."""
        (root / "revs").mkdir(parents=True)
        (root / "revs" / "1.conf").write_text(POWER_ON.format(name=name))
        (root / "applied").write_text("1")
        (root / "parent").write_text("")
        return cls(root)

    def _read(self, name: str) -> str:
        p = self.root / name
        return p.read_text() if p.exists() else ""

    def _expire(self) -> None:
        """A commit-confirm whose window ran out goes back to its parent, as the device does."""
        pending = self._read("pending").split()
        if pending and time.time() > float(pending[1]):
            (self.root / "applied").write_text(self._read("parent"))
            (self.root / "pending").unlink()

    def faults(self) -> list[str]:
        return self._read("faults").splitlines()

    def applied(self) -> str:
        self._expire()
        return self._read("applied")

    def parent(self) -> str:
        self._expire()
        return self._read("parent")

    def pending(self) -> str | None:
        self._expire()
        return self._read("pending").split()[0] if self._read("pending") else None

    def config(self, rev: str | None = None) -> str:
        return (self.root / "revs" / f"{rev or self.applied()}.conf").read_text()

    def stage(self, text: str) -> None:
        for line in text.splitlines():
            if line.strip() and not _LINE.fullmatch(line.strip()):
                raise CandidateError(f"% Invalid input: {line.strip()!r}")
            if line.startswith("mtu ") and not 552 <= int(line.split()[2]) <= 9216:
                raise CandidateError(f"% Invalid input: MTU {line.split()[2]} outside 552-9216")
        (self.root / "candidate").write_text("".join(f"{ln.strip()}\n" for ln in text.splitlines() if ln.strip()))

    def diff(self) -> str:
        cand = self._read("candidate")
        if not cand:
            return ""
        old, new = self.config().splitlines(), cand.splitlines()
        return "".join([f"- {ln}\n" for ln in old if ln not in new] + [f"+ {ln}\n" for ln in new if ln not in old])

    def commit(self, confirm_s: int | None) -> str:
        if self.pending():
            raise CommitError("% Commit refused: a commit waits for its confirm")
        if "refuse-commit" in self.faults():
            raise CommitError("% Commit refused: configuration database locked")
        cand = self._read("candidate")
        now = self.applied()
        if not cand or cand == self.config(now):
            return now
        rev = str(max(int(p.stem) for p in (self.root / "revs").glob("*.conf")) + 1)
        (self.root / "revs" / f"{rev}.conf").write_text(cand)
        (self.root / "parent").write_text(now)
        (self.root / "applied").write_text(rev)
        (self.root / "candidate").unlink()
        if confirm_s:
            (self.root / "pending").write_text(f"{rev} {time.time() + confirm_s}")
        return rev

    def oper_mtu(self) -> dict[str, int]:
        clamp = next((int(f.split()[1]) for f in self.faults() if f.startswith("clamp-mtu ")), 9216)
        return {ln.split()[1]: min(int(ln.split()[2]), clamp) for ln in self.config().splitlines() if ln.startswith("mtu ")}


class ToyDriver(SwitchDriver):
    """The toy OS's driver over its stand-in (the folder ``DEVICES/<name>``)."""

    DEVICES: Path | None = None  # set by the test: the folder of the toy switches
    config_suffix = "toy"

    def __init__(self, host: str, *, port: int = 22, username: str = "", key_file=None, known_hosts=None,
                 name: str | None = None) -> None:
        self.name = name or host
        self.dev: ToyDevice | None = None
        self.committed_revision: str | None = None

    @classmethod
    def render_config(cls, switch: dict) -> str:
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
                                 undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        return env.get_template("toyos_switch.j2").render(switch=switch)

    @staticmethod
    def config_settings(text: str) -> dict[str, str]:
        out = {}
        for line in text.splitlines():
            words = line.split()
            if words[:1] == ["mtu"]:
                out[f"port/{words[1]}/mtu"] = words[2]
            elif words[:1] == ["lossless"]:
                out["toy/lossless"] = words[1]
            elif words[:1] == ["hostname"]:
                out["toy/hostname"] = words[1]
            elif words:
                raise CandidateError(f"not a toy OS line: {line!r}")
        return out

    @staticmethod
    def diff_changes(diff: str, running: str) -> dict[str, tuple[str | None, str | None]]:
        held = ToyDriver.config_settings(running)
        added = ToyDriver.config_settings("\n".join(ln[2:] for ln in diff.splitlines() if ln.startswith("+ ")))
        gone = ToyDriver.config_settings("\n".join(ln[2:] for ln in diff.splitlines() if ln.startswith("- ")))
        return {k: (held.get(k), added.get(k)) for k in [*added, *[g for g in gone if g not in added]]}

    @staticmethod
    def change_tags(key: str, before: str | None, after: str | None) -> tuple[str, ...]:
        if key.startswith("port/") and key.endswith(("/mtu", "/oper_mtu")):
            return mtu_tags(before, after)
        if key == "toy/lossless":
            return lossless_tags(before == "on", after == "on")
        return ()

    def open(self) -> None:
        root = (self.DEVICES or Path("/nonexistent")) / self.name
        if not (root / "applied").exists():
            raise ConnectError(f"no toy switch {self.name} answers", host=self.name, phase="connect")
        self.dev = ToyDevice(root)

    def close(self) -> None:
        self.dev = None

    def capabilities(self) -> Capabilities:
        return Capabilities(commit_confirm=True, replace=False, onbox_diff=True, rollback=True)

    def get_state(self) -> SwitchState:
        lossless = "lossless on" in self.dev.config().splitlines()
        return SwitchState(revision=self.dev.applied(), ports=self.dev.oper_mtu(),
                           roce=RoceState(enabled=lossless, mode="lossless" if lossless else None))

    def load_candidate(self, config: str, *, replace: bool = False) -> None:
        self.dev.stage(config)

    def compare(self) -> str:
        return self.dev.diff()

    def commit(self, *, confirm_within_s: int | None = None, message: str = "") -> str:
        self.committed_revision = self.dev.commit(confirm_within_s)
        return self.committed_revision

    def confirm(self, revision: str | None = None) -> None:
        rev = revision or self.committed_revision or self.dev.pending()
        if self.dev.pending() == rev:
            (self.dev.root / "pending").unlink()
        if self.dev.applied() != rev:
            raise CommitConfirmError(f"revision {rev} is not applied (applied: {self.dev.applied()})")

    def has_pending_commit(self) -> bool:
        return self.dev.pending() is not None

    def applied_parent(self) -> str | None:
        return self.dev.parent() or None

    def discard(self) -> None:
        (self.dev.root / "candidate").unlink(missing_ok=True)

    def rollback(self) -> None:
        if not self.dev.pending():
            raise RollbackError("% Nothing to roll back: no commit waits for its confirm")
        (self.dev.root / "applied").write_text(self.dev.parent())
        (self.dev.root / "pending").unlink()

    def rollback_to(self, revision: str) -> None:
        if not (self.dev.root / "revs" / f"{revision}.conf").exists():
            raise RollbackError(f"% No revision {revision}")
        self.dev.stage(self.dev.config(revision))
        self.dev.commit(None)

    def current_revision(self) -> str:
        return self.dev.applied()

    def running_config(self) -> str:
        return self.dev.config()


#: the same toy OS without commit-confirm (as SONiC's config apply-patch): another platform name
PLAIN_PLATFORM = "toyos-plain"


class PlainToyDriver(ToyDriver):
    """The toy OS built without commit-confirm: its commit knows no confirm window and refuses one,
    as a CLI refuses an option it lacks (the lab is never more lenient than the device)."""

    def capabilities(self) -> Capabilities:
        return Capabilities(commit_confirm=False, replace=False, onbox_diff=True, rollback=True)

    def commit(self, *, confirm_within_s: int | None = None, message: str = "") -> str:
        if confirm_within_s:
            raise CommitError(f"% Invalid input: commit has no option 'confirm {confirm_within_s}'")
        return super().commit(message=message)
