"""The NVUE driver's startup configuration: what a switch boots with after a kept change or a restore.

Cumulus Linux up to 5.8 (and NVOS) does not save on apply: ``nv config apply`` changes the applied
configuration only, and a reboot brings back ``/etc/nvue.d/startup.yaml`` unless ``nv config save``
ran; from CL 5.9 auto save is on by default (``nv set system config auto-save enable on|off``, CL 5.4+).
Sources: CumulusNetworks/docs ``content/nvue-reference/Config-Commands.md`` (``nv config apply``,
``nv config save``: "Overwrites the startup configuration with the applied configuration ...
In Cumulus Linux 5.8 and earlier, auto save is off by default"; ``nv config diff <revision-base>
<revision-target>`` takes ``applied``, ``startup`` or a number) and
``content/nvue-reference/Show-Commands/System-Config.md`` (``nv show system config auto-save``).

The driver does not trust a release number or a setting for the result: it reads the switch's own
``nv config diff startup applied`` (nothing = startup holds the applied revision), saves only when
that diff is not empty, and reads the diff again afterwards.
"""

from __future__ import annotations

from tuning.errors import CommandError, ConnectError, ParseError, TuningError
from tuning.switch import nvue_text as text


class NvueStartup:
    """Mixed into :class:`tuning.switch.nvue.NvueDriver` (uses its ``_send``, ``name`` and
    ``current_revision``).

    Attributes:
        startup_saved_by: how the last :meth:`save_startup` found the startup configuration equal to
            the applied one: ``"switch"`` (it already was: auto save, or nothing changed) or
            ``"nv config save"``; None before.
    """

    startup_saved_by: str | None = None

    def auto_saves(self) -> bool:
        """Whether the switch saves on apply (``nv show system config auto-save``); False on a
        release without the setting (CL before 5.4: ``Invalid Command``)."""
        try:
            out = self._send("nv show system config auto-save", phase="collect")  # type: ignore[attr-defined]
        except CommandError as exc:
            if "Invalid Command" in exc.stderr:
                return False
            raise
        return text.auto_save(out)

    def _auto_save_word(self) -> str:
        """``on`` / ``off`` / ``unreadable``: said in an error only, so reading it never fails a save."""
        try:
            return "on" if self.auto_saves() else "off"
        except (CommandError, ParseError):
            return "unreadable"

    def startup_diff(self, phase: str = "confirm") -> str:
        """``nv config diff startup applied``: "" when the switch boots with its applied configuration.

        Raises:
            ParseError: anything but nothing or a ``- set:`` / ``- unset:`` YAML list.
        """
        out = self._send("nv config diff startup applied", phase=phase)  # type: ignore[attr-defined]
        if not text.is_diff(out):
            raise ParseError("nv config diff startup applied", 0, "nothing or a '- set:' / '- unset:' YAML list",
                             out.strip()[:120])
        return out.strip("\n")

    def save_startup(self, revision: str, *, phase: str, error: type[TuningError]) -> None:
        """Make the applied ``revision`` the startup configuration and prove it: ``nv config save``
        when the startup differs (it must print ``saved``), then the startup diff must be empty and
        ``revision`` still the applied one.

        Raises:
            ``error``: a failure text, no ``saved`` line, a startup that still differs afterwards,
            or another applied revision (naming what was read).
        """
        name = self.name  # type: ignore[attr-defined]
        try:
            if not self.startup_diff(phase):
                self.startup_saved_by = "switch"
                return
            auto = self._auto_save_word()
            out = self._send("nv config save", phase=phase)  # type: ignore[attr-defined]
            left, now = self.startup_diff(phase), self.current_revision()  # type: ignore[attr-defined]
        except (CommandError, ConnectError, ParseError) as exc:
            raise error(f"saving revision {revision} as the startup configuration: {exc}", host=name,
                        phase=phase) from exc
        if not text.SAVED.search(out):
            raise error(f"`nv config save` printed no 'saved': {out.strip()[:200]!r}", host=name, phase=phase)
        if left or now != str(revision):
            raise error(f"after `nv config save` (auto save {auto}) the applied revision "
                        f"is {now} (wanted {revision}) and startup differs by {left[:200]!r}",
                        host=name, phase=phase)
        self.startup_saved_by = "nv config save"
