"""The NVUE simulator's startup configuration: ``nv config save``, auto save, ``nv config diff A B``,
``nv show system config [auto-save]`` and a switch reboot.

The lab stands for Cumulus Linux 5.8 here (:data:`RELEASE`): ``nv config apply`` does not save
unless auto save is on (``nv set system config auto-save enable on``), and a reboot brings back the
startup configuration (``/etc/nvue.d/startup.yaml``). Sources, CumulusNetworks/docs:
``content/nvue-reference/Config-Commands.md`` ("In Cumulus Linux 5.8 and earlier, auto save is off
by default"; from 5.9 on by default; ``nv config save`` "Overwrites the startup configuration with
the applied configuration"; ``nv config diff <revision-base> <revision-target>`` with ``applied``,
``startup`` or a number) and ``content/nvue-reference/Show-Commands/System-Config.md`` (the CL 5.7+
table of ``nv show system config``: ``auto-save`` / ``  enable  off  off`` under ``operational  applied``).
``nv config save`` prints ``saved [rev_id: applied]`` (shared/cases/cli/nvue_config_apply__assume_yes_then_save.txt).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuning.lab.nvue_config import Tree, config_diff

#: the release the lab's saving behaviour stands for (auto save off by default up to 5.8)
RELEASE = "5.8"


@dataclass(frozen=True)
class Reply:
    """What one command printed: stdout, stderr (both with line ends) and exit status."""

    stdout: str = ""
    stderr: str = ""
    rc: int = 0


def invalid(words: list[str]) -> Reply:
    """NVUE's refusal of an unknown command (shared/cases/cli/nvue_errors__ambiguous_and_invalid_command.txt)."""
    return Reply(stderr=f"Invalid Command: {' '.join(words)}\n", rc=1)


class LabStartup:
    """Mixed into :class:`tuning.lab.nvue.NvueSwitch` (uses its revisions, ids, lock and replies).

    Attributes:
        auto_save_default: the release's auto save when the config does not set it (False: CL <= 5.8;
            True: a CL 5.9+ switch, for tests).
    """

    auto_save_default: bool = False

    @property
    def auto_save(self) -> bool:
        """Whether ``nv config apply`` saves: the applied ``system config auto-save enable``, else the release's."""
        enable = self.applied.get("system", {}).get("config", {}).get("auto-save", {}).get("enable")  # type: ignore[attr-defined]
        return self.auto_save_default if enable is None else enable == "on"

    @property
    def startup(self) -> Tree:
        """The startup configuration tree (the saved revision's)."""
        return self.revisions[self.saved_id].config  # type: ignore[attr-defined]

    def mark_applied(self, rev) -> None:  # type: ignore[no-untyped-def]
        """A revision applied for good: saved (``applied_and_saved``) when auto save is on, else ``applied``."""
        if self.auto_save:
            rev.state = "applied_and_saved"
            self.saved_id = rev.rev_id
        else:
            rev.state = "applied"

    def _save(self, words: list[str], ask) -> Reply:  # type: ignore[no-untyped-def]
        if words[2:]:
            return invalid(words)
        self.saved_id = self.applied_id  # type: ignore[attr-defined]
        rev = self.revisions[self.applied_id]  # type: ignore[attr-defined]
        rev.state = "applied_and_saved" if rev.state == "applied" else rev.state
        return Reply("saved [rev_id: applied]\n")  # type: ignore[attr-defined]

    def _diff_revisions(self, words: list[str]) -> Reply:
        """``nv config diff BASE TARGET``: what TARGET sets and unsets against BASE (YAML, or nothing)."""
        trees = [self._tree(w) for w in words[2:]]
        if len(trees) != 2 or None in trees:
            return invalid(words)
        return Reply(config_diff(trees[0], trees[1]))  # type: ignore[attr-defined]

    def _tree(self, name: str) -> Tree | None:
        if name in ("applied", "startup"):
            return self.applied if name == "applied" else self.startup  # type: ignore[attr-defined]
        rev = self.revisions.get(int(name)) if name.isdigit() else None  # type: ignore[attr-defined]
        return None if rev is None else rev.config

    def _show_system(self, words: list[str], ask) -> Reply:  # type: ignore[no-untyped-def]
        """``nv show system config`` and ``nv show system config auto-save`` (CL 5.7+ tables)."""
        on = "on" if self.auto_save else "off"
        if words[2:] == ["config", "auto-save"]:
            return Reply(f"        operational  applied\n------  -----------  -------\nenable  {on:<11}  {on}\n")  # type: ignore[attr-defined]
        if words[2:] == ["config"]:
            return Reply("             operational  applied\n-----------  -----------  ---------\n"
                               "             apply        apply\n             auto-save    auto-save\n"
                               "             snippet      snippet\napply\n  overwrite  all          all\n"
                               f"auto-save\n  enable     {on:<11}  {on}\n")
        return invalid(words)

    def reboot(self) -> int:
        """Power-cycle the switch: a pending commit-confirm and the pending candidate are lost, and
        the startup configuration is applied again. Returns the applied revision after the boot."""
        with self._lock:  # type: ignore[attr-defined]
            if self.confirm is not None:  # type: ignore[attr-defined]  # not confirmed: gone, as when it expires
                self.revisions[self._finish_confirm().rev_id].state = "confirm_failed"  # type: ignore[attr-defined]
            self.pending = None
            self.applied_id = self.saved_id  # type: ignore[attr-defined]
            self._write_fabric_json()  # type: ignore[attr-defined]
            return self.applied_id
