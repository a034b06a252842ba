"""Files NVUE manages, edited by hand on a lab switch (``fabtune lab inject SWITCH hand-edit FILE[,FILE...]``),
and the warning an interactive ``nv config apply`` gives before it overwrites them.

Sources: the files NVUE manages, CumulusNetworks/docs
``content/cumulus-linux-58/System-Configuration/NVIDIA-User-Experience-NVUE/NVUE-CLI.md`` ("Configuration
Files that NVUE Manages"); the warning, verbatim (a tab before each ``- PATH``), CumulusNetworks/docs
``content/cumulus-linux-516/System-Configuration/Authentication-Authorization-and-Accounting/FIPS.md``, followed
there by ``Are you sure? [y/N]``; what the default ``overwrite all`` does, CumulusNetworks/docs
``content/nvue-reference/Set-and-Unset-Commands/System-Configuration.md`` (``nv set system config apply overwrite``:
"you see a warning when you try to apply the configuration and you can stop the apply before NVUE overwrites
the local modification"). The lab plays ``overwrite all`` (the default) only.

Inferred, no source: which applies list a file (the lab: every apply that writes a revision, the pending one or
``nv config apply <rev>``, lists every hand-edited file, as NVUE renders all its files at apply); that ``-y``
prints no warning (the lab prints what it prints without one); that an apply answered yes, a ``--confirm-no``
or an expired confirm window (which apply a revision) leave the files NVUE's again (the next apply warns of
nothing until the next hand edit).
"""

from __future__ import annotations

from tuning.errors import InputError

#: the files NVUE manages (NVUE-CLI.md, CL 5.8)
MANAGED = ("/etc/network/interfaces", "/etc/frr/frr.conf", "/etc/cumulus/switchd.conf",
           "/etc/cumulus/switchd.d/ptp.conf", "/etc/frr/daemons", "/etc/hosts", "/etc/default/isc-dhcp-relay-default",
           "/etc/dhcp/dhcpd.conf", "/etc/hostname", "/etc/cumulus/datapath/qos/qos_features.conf",
           "/etc/mlx/datapath/qos/qos_infra.conf", "/etc/cumulus/switchd.d/qos.conf", "/etc/cumulus/ports.conf",
           "/etc/ntp.conf", "/etc/ptp4l.conf", "/etc/snmp/snmpd.conf")
HEADER = "Warning: The following files have been changed since the last save, and they WILL be overwritten.\n"


def warning(files: tuple[str, ...]) -> str:
    """The files-changed warning listing ``files`` ("" for none), one ``<TAB>- PATH`` line each."""
    return HEADER + "".join(f"\t- {f}\n" for f in files) if files else ""


def checked(value: str | None) -> list[str]:
    """The files of an injection's VALUE (comma-separated absolute paths, each one NVUE manages).

    Raises:
        InputError: no value, or a path that is not in :data:`MANAGED` (naming the allowed ones).
    """
    files = [f.strip() for f in (value or "").split(",") if f.strip()]
    bad = [f for f in files if f not in MANAGED]
    if not files or bad:
        raise InputError("VALUE", "value", f"hand-edit needs FILE[,FILE...] among the files NVUE manages "
                         f"({', '.join(MANAGED)}); got {value!r}")
    return list(dict.fromkeys(files))


class HandEdits:
    """What an NVUE switch of the lab knows of its files edited by hand (a mixin of
    :class:`tuning.lab.nvue.NvueSwitch`, whose ``faults()`` reads the injections)."""

    _overwrote_at = 0  # the hand-edit injection (its time, ns) an apply last overwrote

    def hand_edited(self) -> tuple[str, ...]:
        """The files edited by hand and not overwritten since (() when none)."""
        f = self.faults()  # type: ignore[attr-defined]
        return f.hand_edited if f.hand_edit_at > self._overwrote_at else ()

    def overwrite_files(self) -> None:
        """An applied revision: NVUE wrote its files again, hand edits included."""
        self._overwrote_at = max(self._overwrote_at, self.faults().hand_edit_at)  # type: ignore[attr-defined]
