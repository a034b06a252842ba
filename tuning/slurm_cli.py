"""Running Slurm's client tools (``sinfo``, ``salloc``, ``srun``, ``scontrol``, ``scancel``) for the
Slurm engine (:mod:`tuning.slurm_engine`) and its reboots (:mod:`tuning.slurm_reboot`): argv only,
never a shell, with ``$SLURM_CONF`` as the environment sets it. Sources: the man pages of Slurm 22.05.
"""

from __future__ import annotations

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
