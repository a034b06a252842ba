"""Boot persistence: the files :func:`tuning.render.node_files` renders from the COMPUTED plan
values (the very IRQ -> CPU map, MTU and QoS values apply writes, as the same commands), laid on
the node: the sysctl.d drop-in, the NIC setup script and its systemd unit, which is then enabled
(``systemctl enable`` makes ``multi-user.target.wants/fabtune-nic.service``). A file absent
before a rollout is removed again on restore; a unit enabled by the rollout is disabled.

The setup script's commands address files relative to the root (``./proc/irq/151/...``): the
unit runs it with ``WorkingDirectory=/``, and the lab's ``lab reboot`` runs it in the sysroot.
"""

from __future__ import annotations

import base64
import functools
from typing import Sequence

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, NodeFacts, decode
from tuning.templating import render_template
from tuning.transport.base import q, sysroot_path

#: device path -> mode of the persisted files
MODES = {"/usr/local/sbin/fabtune-nic-setup": "0755"}
UNIT = "fabtune-nic.service"
WANTS_LINK = f"/etc/systemd/system/multi-user.target.wants/{UNIT}"


def boot_settings(settings: Sequence[Domain], spec: NodeSpec, facts: NodeFacts,
                  wanted: Sequence[dict] | None = None) -> tuple[list[str], dict[str, str]]:
    """The boot script's commands and the sysctl drop-in's values, from the domains' desired values
    (``wanted``, one per domain of ``settings``, when the caller has them already: ``render``).

    Returns:
        (commands relative to ``/``, ``{sysctl name: value}``).
    """
    cmds: list[str] = []
    sysctls: dict[str, str] = {}
    for i, d in enumerate(settings):
        want = wanted[i] if wanted is not None else d.desired(spec, facts)
        if d.name == "sysctl":
            sysctls = {k.split("/", 1)[1]: v for k, v in want.items()}
        elif d.boot_script:
            cmds += [_boot_guard(d.name, k, c, facts) for k, v in want.items()
                     if (c := d.command(k, v, spec, facts, "."))]
    return cmds, sysctls


def _boot_guard(domain: str, key: str, cmd: str, facts: NodeFacts) -> str:
    """An IRQ line of the boot script pins IRQ N only while N is still this NIC's completion IRQ.

    IRQ numbers can change between boots (driver load order, a new device): without the guard the
    script would pin another device's IRQ, or stop at a missing one under ``set -e`` and skip every
    later line. The check reads ``/proc/interrupts`` (its line for N ends ``mlx5_comp<k>@pci:<BDF>``,
    shared/cases INDEX.md) and says on stderr what it skipped.
    """
    if domain != "irq":
        return cmd
    _, netdev, irq = key.split("/")
    bdf = facts.nics.get(netdev, {}).get("bdf", "")
    pattern = q(f"^ *{int(irq)}:.*mlx5_comp[0-9]+@pci:{bdf}$")
    why = q(f"fabtune-nic-setup: IRQ {int(irq)} is no longer a completion IRQ of {netdev} ({bdf}); "
            "not pinned: run fabtune apply")
    return f"if grep -Eqs {pattern} proc/interrupts; then {cmd}; else echo {why} >&2; fi"


#: device path -> template of the files laid on every node
NODE_FILES = {
    "/etc/sysctl.d/90-fabtune.conf": "node/sysctl.conf.j2",
    "/usr/local/sbin/fabtune-nic-setup": "node/fabtune-nic-setup.sh.j2",
    "/etc/systemd/system/fabtune-nic.service": "node/fabtune-nic.service.j2",
}


def node_files_from_plan(commands: list[str], sysctls: dict[str, str]) -> dict[str, str]:
    """Device path -> content of every boot-persistence file, from the plan's values.

    Args:
        commands: the setup script's commands (the apply commands of the MTU, NIC QoS and IRQ
            values, addressing files relative to ``/``).
        sysctls: kernel parameter -> value for the sysctl.d drop-in.

    Raises:
        ValueError: a command or value holding a new line (it would add a line to a file).
    """
    for text in [*commands, *sysctls, *sysctls.values()]:
        if "\n" in text or "\r" in text:
            raise ValueError(f"{text!r}: a new line cannot go into a node file")
    return dict(_rendered(tuple(commands), tuple(sysctls.items())))


@functools.lru_cache(maxsize=64)
def _rendered(commands: tuple[str, ...], sysctls: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """(device path, content) of each boot file, rendered once per distinct plan: the nodes of one
    profile and shape have the same commands and values (10,016 nodes of a fleet, a handful of
    plans), and the unit file depends on neither."""
    ctx = {"commands": list(commands), "sysctls": dict(sysctls)}
    return tuple((path, render_template(tpl, **ctx)) for path, tpl in NODE_FILES.items())


class FilesDomain(Domain):
    """One key per file: ``file/<path>`` -> its whole content; ``unit/fabtune-nic.service`` ->
    ``enabled`` | ``disabled``."""

    name = "files"

    def __init__(self, settings: Sequence[Domain]):
        self._settings = list(settings)

    @property
    def settings(self) -> list[Domain]:
        """The domains whose values the boot files persist."""
        return list(self._settings)

    def reads(self) -> set[str]:
        """Itself and every domain it persists: its files are built from their desired values,
        which need their reads (a files-only read cannot plan it)."""
        return {self.name, *(d.name for d in self._settings)}

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        link = q(sysroot_path(sysroot, WANTS_LINK))
        return [f"rb {q('file' + p)} {q(sysroot_path(sysroot, p))}" for p in NODE_FILES] + [
            f"if [ -L {link} ]; then printf '%s\\tenabled\\n' {q('unit/' + UNIT)}; "
            f"else printf '%s\\tdisabled\\n' {q('unit/' + UNIT)}; fi"]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        out = {f"file{p}": decode(facts.raw.get(f"file{p}", ABSENT)) for p in NODE_FILES}
        out[f"unit/{UNIT}"] = facts.raw.get(f"unit/{UNIT}", "disabled")
        return out

    def desired(self, spec: NodeSpec, facts: NodeFacts, wanted: Sequence[dict] | None = None) -> dict[str, str]:
        """Every file and the unit enabled; nothing when no persisted domain wants a value (a
        profile that asks for nothing lays no empty script and enables no unit that does nothing).
        ``wanted``: the persisted domains' desired values, one per domain, when the caller has them
        (``plan --offline``); None: each is asked."""
        cmds, sysctls = boot_settings(self._settings, spec, facts, wanted)
        if not cmds and not sysctls:
            return {}
        out = {f"file{p}": content for p, content in node_files_from_plan(cmds, sysctls).items()}
        out[f"unit/{UNIT}"] = "enabled"
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        if key.startswith("unit/"):
            verb = {"enabled": "enable", "disabled": "disable"}.get(value)
            if verb == "disable":  # a push cut short may never have installed the unit: then it is disabled
                link = q(sysroot_path(sysroot, WANTS_LINK))
                return f"{{ ! test -L {link} || systemctl{_root(sysroot)} disable {q(UNIT)}; }}"
            return f"systemctl{_root(sysroot)} {verb} {q(UNIT)}" if verb else None
        path = key[len("file"):]
        target = q(sysroot_path(sysroot, path))
        if value == ABSENT:
            return f"rm -f {target}"
        data = base64.b64encode(value.encode()).decode()
        mode = MODES.get(path, "0644")
        return f"printf %s {data} | base64 -d > {target} && chmod {mode} {target}"

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        if key.startswith("unit/"):
            return f"test -L {q(sysroot_path(sysroot, WANTS_LINK))} && echo enabled || echo disabled"
        return f"base64 -w0 {q(sysroot_path(sysroot, key[len('file'):]))}"

    def parse_read(self, key: str, output: str) -> str:
        if key.startswith("unit/"):
            return output.strip()
        return base64.b64decode(output.strip()).decode(errors="replace")

    def same(self, have: str, want: str) -> bool:
        """Files compare byte for byte."""
        return have == want


def _root(sysroot: str) -> str:
    """``systemctl``'s ``--root=SYSROOT`` (unit links made inside the sysroot), none on ``/``."""
    return "" if sysroot in ("", "/") else f" --root={q(sysroot)}"
