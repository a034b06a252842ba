"""Running Slurm's client tools (``sinfo``, ``salloc``, ``srun``, ``scontrol``, ``scancel``) for the
Slurm engine (:mod:`tuning.slurm_engine`) and its reboots (:mod:`tuning.slurm_reboot`): argv only,
never a shell, with ``$SLURM_CONF`` as the environment sets it. Sources: the man pages of Slurm 22.05.
"""

from __future__ import annotations

import os
import shlex
import subprocess

from tuning.errors import ConnectError, SetupError


def call(argv: list[str], timeout_s: float = 60.0) -> tuple[int, str, str]:
    """Run a Slurm client (argv, no shell) with ``$SLURM_CONF`` as set; ``(exit code, stdout, stderr)``.

    Raises:
        SetupError: the tool is not installed (exit 2: nothing was done).
        ConnectError: it did not end within ``timeout_s``.
    """
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise SetupError(f"{argv[0]}: not found on PATH: --engine slurm needs the Slurm client tools "
                           "(Debian: slurm-client)", phase="slurm") from None
    except subprocess.TimeoutExpired:
        raise ConnectError(f"{shlex.join(argv[:3])} ...: no end within {timeout_s:g} s", phase="slurm") from None
    return p.returncode, p.stdout, p.stderr


def said(out: str, err: str) -> str:
    """What a Slurm client said, on one line (stderr, else stdout), 300 characters at most."""
    return " ".join((err.strip() or out.strip()).split())[-300:]


#: what Slurm's clients print when they cannot read a configuration (Slurm 22.05, as Debian's sinfo
#: prints them: ``SLURM_CONF`` naming a missing file, and unset without /etc/slurm/slurm.conf)
CONFIG_UNREADABLE = ("s_p_parse_file: cannot stat file", "Unable to process configuration file",
                     "Could not establish a configuration source")


def check_conf(who: str) -> None:
    """``$SLURM_CONF``, when set, names a file (a client would retry a missing one for 60 s, measured
    with Debian's sinfo 22.05, before saying so). Raises SetupError naming it, ``who`` first."""
    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):
        raise SetupError(f"{who}: $SLURM_CONF is {conf}: no such file; set SLURM_CONF to the cluster's slurm.conf")


def unreadable_conf(who: str, tool: str, out: str, err: str) -> None:
    """Raise SetupError when a failed client's words (``out``, ``err``) say it could not read Slurm's
    configuration (:data:`CONFIG_UNREADABLE`), naming ``$SLURM_CONF``; else return."""
    if any(w in err + out for w in CONFIG_UNREADABLE):
        conf = os.environ.get("SLURM_CONF")
        where = f"$SLURM_CONF is {conf}" if conf else "$SLURM_CONF is not set (Slurm reads /etc/slurm/slurm.conf)"
        raise SetupError(f"{who}: {tool} cannot read Slurm's configuration ({where}): {said(out, err)}; "
                         "set SLURM_CONF to the cluster's slurm.conf")
