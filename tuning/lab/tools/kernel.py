"""Stand-ins of the kernel and boot tools of a lab node: ``cpupower`` (idle-info, idle-set) and
``update-grub``. Standard library only: these start per call.

- ``cpupower [-c CPULIST|all] idle-info [-s]`` prints what linux ``tools/power/cpupower/utils/
  cpuidle-info.c`` prints (the Ubuntu 24.04 build of kernel 6.8: no ``Residency:`` line, added in
  6.12): ``CPUidle driver:``, ``CPUidle governor:``, then per CPU ``analyzing CPU N:``, a blank line,
  ``Number of idle states:``, ``Available idle states:`` and per state ``NAME:`` (``NAME (DISABLED) :``
  when disabled), ``Flags/Description:``, ``Latency:``, ``Usage:``, ``Duration:``, and a blank line.
  Default CPU: the one it runs on (0 here).
- ``cpupower [-c CPULIST|all] idle-set -d N | -e N | -D LATENCY | -E`` writes the cpuidle ``disable``
  files of every chosen online CPU (default: all) and prints ``cpuidle-set.c``'s lines
  (``Idlestate 3 disabled on CPU 0``, ``Idlestate 5 not available on CPU 0``).
- Without root (``cpupower.c``: ``needs_root`` of idle-set and frequency-set):
  ``Subcommand idle-set needs root privileges`` on stderr, exit 1. Other subcommands are not
  emulated: the stand-in says so and exits 1 (never a made-up output).
- ``update-grub`` is Debian's ``exec grub-mkconfig -o /boot/grub/grub.cfg``: without root
  ``grub-mkconfig: You must run this as root`` (exit 1, GRUB ``util/grub-mkconfig.in``); as root it
  sources ``/etc/default/grub`` and ``/etc/default/grub.d/*.cfg`` with ``sh`` as grub-mkconfig does,
  prints its progress lines on stderr (``Sourcing file `/etc/default/grub'``, ``Generating grub
  configuration file ...``, ``Found linux image: ...``, ``done``) and writes ``boot/grub/grub.cfg``
  (:func:`tuning.lab.hw_cpu.grub_cfg`, mode 0444). A file that does not source is grub-mkconfig's
  ``set -e`` exit with the shell's message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tuning.lab.sudo import is_privileged
from tuning.lab.tools.node import _read, _sysroot

CPU_DIR = "sys/devices/system/cpu"


def _online(root: Path) -> list[int]:
    from tuning.cpulist import parse_cpulist

    return parse_cpulist(_read(root / CPU_DIR / "online"))


def _states(root: Path, cpu: int) -> list[Path]:
    folder = root / CPU_DIR / f"cpu{cpu}" / "cpuidle"
    return sorted((p for p in folder.glob("state*") if p.name[5:].isdigit()), key=lambda p: int(p.name[5:]))


# ---- cpupower ------------------------------------------------------------------------------

def cpupower(argv: list[str]) -> int:
    """``cpupower [-c CPULIST|all] idle-info [-s] | idle-set -d N|-e N|-D LAT|-E``; see the module doc."""
    from tuning.cpulist import parse_cpulist

    args, chosen = list(argv), None
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt in ("-c", "--cpu") and args:
            value = args.pop(0)
            try:
                chosen = "all" if value == "all" else parse_cpulist(value)
            except ValueError:
                print("Error parsing cpu list", file=sys.stderr)
                return 1
        else:
            print(f"Unknown option: {opt}", file=sys.stderr)
            return 1
    if not args:
        print("Usage:\tcpupower [-c|--cpu cpulist ] <command> [<args>]")
        return 1
    cmd, rest = args[0], args[1:]
    if cmd in ("idle-set", "frequency-set", "set") and not is_privileged():
        print(f"Subcommand {cmd} needs root privileges", file=sys.stderr)
        return 1
    root = _sysroot()
    if cmd == "idle-info":
        return _idle_info(root, chosen, rest)
    if cmd == "idle-set":
        return _idle_set(root, chosen, rest)
    print(f"cpupower {cmd}: not emulated by the fabtune lab (idle-info and idle-set are)", file=sys.stderr)
    return 1


def _idle_info(root: Path, chosen, rest: list[str]) -> int:
    verbose = True
    for opt in rest:
        if opt in ("-s", "--silent"):
            verbose = False
        else:
            print("invalid or unknown argument")
            return 1
    cpus = _online(root) if chosen == "all" else (chosen or [0])
    idle = root / CPU_DIR / "cpuidle"
    print(f"CPUidle driver: {_read(idle / 'current_driver')}")
    print(f"CPUidle governor: {_read(idle / 'current_governor_ro')}")
    online = set(_online(root))
    for cpu in cpus:
        print(f"analyzing CPU {cpu}:")
        if cpu not in online:
            print(" *is offline\n")
            continue
        print()
        states = _states(root, cpu)
        if not states:
            print(f"CPU {cpu}: No idle states")
        else:
            print(f"Number of idle states: {len(states)}")
            print("Available idle states:" + "".join(" " + _read(s / "name") for s in states))
            for s in states if verbose else []:
                disabled = _read(s / "disable") != "0"
                print(f"{_read(s / 'name')}{' (DISABLED) ' if disabled else ''}:")
                print(f"Flags/Description: {_read(s / 'desc')}")
                print(f"Latency: {_read(s / 'latency')}")
                print(f"Usage: {_read(s / 'usage')}")
                print(f"Duration: {_read(s / 'time')}")
        print()
    return 0


def _idle_set(root: Path, chosen, rest: list[str]) -> int:
    if len(rest) == 1 and rest[0] in ("-E", "--enable-all"):
        mode, value = "E", ""
    elif len(rest) == 2 and rest[0] in ("-d", "--disable", "-e", "--enable", "-D", "--disable-by-latency"):
        mode, value = rest[0].lstrip("-")[0], rest[1]
    else:
        print("invalid or unknown argument")
        return 1
    if mode == "D" and not value.isdigit():
        print(f"Bad latency value: {value}")
        return 1
    online = _online(root)
    cpus = online if chosen in (None, "all") else [c for c in chosen if c in online]
    for cpu in cpus:
        states = _states(root, cpu)
        if mode in "de":
            k = int(value) if value.isdigit() else 0  # atoi()
            verb = "disabled" if mode == "d" else "enabled"
            if k >= len(states):
                print(f"Idlestate {k} not available on CPU {cpu}")
                continue
            (states[k] / "disable").write_text("1\n" if mode == "d" else "0\n")
            print(f"Idlestate {k} {verb} on CPU {cpu}")
            continue
        for k, s in enumerate(states):
            disabled = _read(s / "disable") != "0"
            if mode == "D" and not disabled and int(value) <= int(_read(s / "latency")):
                (s / "disable").write_text("1\n")
                print(f"Idlestate {k} disabled on CPU {cpu}")
            elif disabled and (mode == "E" or int(value) > int(_read(s / "latency"))):
                (s / "disable").write_text("0\n")
                print(f"Idlestate {k} enabled on CPU {cpu}")
    return 0


# ---- update-grub ---------------------------------------------------------------------------

#: sources the config as grub-mkconfig does and prints the two command-line variables after a marker
_SOURCE = ('. "$1"; for x in "$2"/*.cfg; do if [ -e "$x" ]; then . "$x"; fi; done; '
           'printf "\\n@@grub\\n%s\\n%s\\n" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"')


def update_grub(argv: list[str]) -> int:
    """``update-grub``: regenerate ``boot/grub/grub.cfg`` from ``etc/default/grub``; see the module doc."""
    from tuning.lab.hw_cpu import KERNEL, grub_cfg

    if not is_privileged():
        print("grub-mkconfig: You must run this as root", file=sys.stderr)
        return 1
    root = _sysroot()
    default, confd = root / "etc/default/grub", root / "etc/default/grub.d"
    res = subprocess.run(["sh", "-c", _SOURCE, "sh", str(default), str(confd)], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL)
    if default.is_file():
        print("Sourcing file `/etc/default/grub'", file=sys.stderr)
    for cfg in sorted(confd.glob("*.cfg")):
        print(f"Sourcing file `/etc/default/grub.d/{cfg.name}'", file=sys.stderr)
    if res.returncode != 0 or "\n@@grub\n" not in res.stdout:
        sys.stderr.write(res.stderr)
        return res.returncode or 1
    linux, linux_default = (res.stdout.rsplit("\n@@grub\n", 1)[1].split("\n") + ["", ""])[:2]
    print("Generating grub configuration file ...", file=sys.stderr)
    print(f"Found linux image: /boot/vmlinuz-{KERNEL}", file=sys.stderr)
    print(f"Found initrd image: /boot/initrd.img-{KERNEL}", file=sys.stderr)
    cfg = root / "boot/grub/grub.cfg"
    new = cfg.with_name("grub.cfg.new")
    new.unlink(missing_ok=True)
    new.write_text(grub_cfg(linux, linux_default))
    new.chmod(0o444)
    new.replace(cfg)
    print("done", file=sys.stderr)
    return 0
