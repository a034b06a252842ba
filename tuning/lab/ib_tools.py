"""What the IB lab runs: ibsim, OpenSM and infiniband-diags found on this machine, and their environment.

Debian packages (``.ci/run`` installs them): ``ibsim-utils`` (``ibsim`` 0.10), ``libumad2sim0``
(``libumad2sim.so``, preloaded into every libibumad program so its MADs go to ibsim instead of
``/dev/infiniband/umadN``), ``opensm`` (3.3.23) and ``infiniband-diags`` (``iblinkinfo``,
``perfquery``, ``ibqueryerrors``, ``smpquery``, ``saquery``, ``sminfo``, ``ibportstate``).
Nothing here names a path of one machine: programs come from ``PATH`` (plus ``sbin``, where a normal
user's PATH may lack it), the library from ``dpkg -L libumad2sim0``, else from the multiarch
library folders of this Python's platform.

How a client finds its ibsim (``umad2sim/sim_client.c``): ``IBSIM_SERVER_NAME`` set -> UDP to that
host, ``IBSIM_SERVER_PORT`` (default 7070) and the ports above it, one per client; unset -> datagram
sockets in Linux's abstract namespace named ``<IBSIM_SOCKNAME>:ctl``, ``:in<pid>``, ``:out<n>``
(default ``sim``). The lab uses the second, with a name of its own per lab folder, and removes the
first's variables: without its own name a client attaches to any ibsim of the machine, and no TCP
or UDP port is taken. ``SIM_HOST`` names the node a client attaches at (default: the first node of
the net file). libumad2sim makes its fake sysfs in ``./sys-<pid>`` (removed at a clean exit), so
every program runs in the lab's ``ib/`` folder.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from tuning.errors import CommandError, SetupError

__all__ = ["PACKAGES", "WRAPPER_MARK", "ib_env", "program", "run_tool", "sockname", "umad2sim_library"]

#: program -> the Debian package that ships it
PACKAGES = {
    "ibsim": "ibsim-utils", "opensm": "opensm", "libumad2sim.so": "libumad2sim0",
    **{t: "infiniband-diags" for t in ("iblinkinfo", "perfquery", "ibqueryerrors", "smpquery", "saquery",
                                       "sminfo", "ibportstate", "ibnetdiscover")},
}
_CLEARED = ("IBSIM_SERVER_NAME", "IBSIM_SERVER_PORT", "SIM_HOST", "SIM_SET_ISSM", "LD_PRELOAD")


def _missing(name: str) -> SetupError:
    pkg = PACKAGES[name]
    return SetupError(f"{name} not found: the IB lab needs the Debian package {pkg} "
                      f"(as root: apt-get install {pkg}; .ci/run installs it)")


#: the second line of every script of an IB lab's ``bin/`` (:attr:`tuning.lab.ib.IbLab.tools_dir`)
WRAPPER_MARK = "# fabtune IB lab"


def program(name: str) -> str:
    """The path of ``name`` (``opensm``, ``iblinkinfo``) on PATH or in an sbin folder, never an IB lab's
    wrapper of it (a lab's ``bin/`` on PATH: its scripts run the real tool attached at that lab's SM leaf
    over that lab's ibsim, whatever ``SIM_HOST`` or socket the caller asks).

    Raises:
        SetupError: not installed; names the Debian package.
    """
    path = os.environ.get("PATH", os.defpath) + os.pathsep + "/usr/sbin:/sbin"
    for folder in path.split(os.pathsep):
        found = shutil.which(name, path=folder) if folder else None
        if found and not _is_wrapper(found):
            return found
    raise _missing(name)


def _is_wrapper(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return WRAPPER_MARK.encode() in f.read(256)
    except OSError:
        return False


def _multiarch_dirs() -> list[Path]:
    arch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = [Path(sysconfig.get_config_var("LIBDIR") or "/usr/lib")]
    return [d / arch for d in dirs if arch] + dirs


@functools.lru_cache(maxsize=1)
def umad2sim_library() -> str:
    """The path of ``libumad2sim.so``: as dpkg lists it, else under this platform's library folders
    (looked up once a process: every lab program's environment names it, and ``dpkg-query`` took a
    process of its own each time).

    Raises:
        SetupError: not installed (names ``libumad2sim0``).
    """
    dpkg = shutil.which("dpkg-query")
    if dpkg:
        listed = subprocess.run([dpkg, "-L", "libumad2sim0"], capture_output=True, text=True, check=False)
        for line in listed.stdout.splitlines():
            if line.endswith("/libumad2sim.so") and Path(line).is_file():
                return line
    for d in _multiarch_dirs():
        for cand in (d / "umad2sim" / "libumad2sim.so", d / "libumad2sim.so"):
            if cand.is_file():
                return str(cand)
    raise _missing("libumad2sim.so")


def sockname(lab_dir: Path) -> str:
    """The lab's ``IBSIM_SOCKNAME``: ``fabtune-`` and 12 hex digits of its folder's real path."""
    digest = hashlib.sha256(str(Path(lab_dir).resolve()).encode()).hexdigest()[:12]
    return f"fabtune-{digest}"


def ib_env(lab_dir: Path, *, host: str | None = None, preload: bool = True) -> dict[str, str]:
    """The environment of a program of the lab: its own ibsim socket name, libumad2sim preloaded,
    attached at ``host`` (an ibsim node id) when given; OpenSM's cache and temp files in the folder."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env["IBSIM_SOCKNAME"] = sockname(lab_dir)
    env["OSM_CACHE_DIR"] = str(lab_dir / "cache")
    env["OSM_TMP_DIR"] = str(lab_dir)
    if preload:
        env["LD_PRELOAD"] = umad2sim_library()
    if host:
        env["SIM_HOST"] = host
    return env


def run_tool(lab_dir: Path, tool: str, args: list[str], *, host: str | None = None,
             ok_codes: tuple[int, ...] = (0,), timeout_s: float = 30.0) -> str:
    """Run one infiniband-diags program over the lab's fabric; returns its standard output.

    Its standard error (libumad2sim's ``ibwarn: ... attached as client N at node "leaf01"``) is not
    part of the output, as on a real host where no such line is printed.

    Raises:
        SetupError: the program is not installed.
        CommandError: it exited with a code outside ``ok_codes`` (``ibqueryerrors`` exits 1 when it
            found errors) or ran past ``timeout_s``.
    """
    argv = [program(tool), *args]
    cmd = " ".join([tool, *args])
    try:
        done = subprocess.run(argv, cwd=lab_dir, env=ib_env(lab_dir, host=host), capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        raise CommandError(cmd, 124, f"ran past {timeout_s:g} s", phase="ib-lab") from e
    if done.returncode not in ok_codes:
        raise CommandError(cmd, done.returncode, done.stderr or done.stdout, phase="ib-lab")
    return done.stdout
