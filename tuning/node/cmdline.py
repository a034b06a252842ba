"""Kernel command line: options persisted in the boot loader config, active after the next boot.

One key per option, ``cmdline/<option>`` (``cmdline/iommu`` = ``pt``; ``""`` for a bare flag), whose
value is what the boot loader config holds: the words of ``GRUB_CMDLINE_LINUX`` and
``GRUB_CMDLINE_LINUX_DEFAULT`` as ``grub-mkconfig`` sees them (``/etc/default/grub`` and then
``/etc/default/grub.d/*.cfg`` sourced with ``sh``, as GRUB ``util/grub-mkconfig.in`` does; the
last occurrence of an option counts, ``-`` and ``_`` in a name are the same, as the kernel's
``parameq`` has it). Options come from ``kernel.cmdline``, from ``cpu.isolate`` (``isolcpus`` and
``nohz_full`` = the GPU workers' CPUs of :func:`tuning.node.cpuplan.isolated_cpus`) and from
``cpu.max_idle_latency_us`` (``intel_idle.states_off`` = the bit mask of the idle states the
``power`` domain disables live, intel_idle nodes with that parameter only: kernel >= 5.7,
``Documentation/admin-guide/pm/intel_idle.rst``).

Apply (Debian / Ubuntu, the node has ``/etc/default/grub`` and ``update-grub``): ``awk`` puts the
option into the ``GRUB_CMDLINE_LINUX=`` line (replaced in place when there, else appended; removed
from every other ``GRUB_CMDLINE_LINUX*`` line), then ``update-grub`` regenerates
``/boot/grub/grub.cfg``; when ``update-grub`` fails the config is put back and the change fails.
The edited config replaces the old one by ``mv`` (rename), so a kill at any point leaves a whole file.
Restore removes the option again (or writes its old value back in place), so the file and the
regenerated ``grub.cfg`` come back byte for byte. Nodes without that pair (RHEL-like ``grubby``
nodes) are refused at plan (not supported yet). fabtune never reboots.

Live and persisted are shown apart: the value read from the boot loader config is the key's
value; the running kernel's ``/proc/cmdline`` decides the change's effect (``reboot_required``
until it holds the value, ``live`` when only the config was wrong), and
:meth:`CmdlineDomain.findings` reports an option persisted but not live yet (code
``reboot-required``).

Example profile::

    kernel:
      cmdline: {iommu: pt, "pcie_aspm": "off"}
"""

from __future__ import annotations

import re

from tuning.model import NodeSpec
from tuning.model.node_tuning import overlaps
from tuning.node.base import ABSENT, Domain, Finding, NodeFacts, Unfit, decode
from tuning.node.power import idle_table, idle_table_script
from tuning.transport.base import q, sysroot_path

GRUB_DEFAULT = "/etc/default/grub"
GRUB_DEFAULT_D = "/etc/default/grub.d"
STATES_OFF = "/sys/module/intel_idle/parameters/states_off"
#: what grub-mkconfig does before it builds the linux lines: source the config, then print the two
#: command-line variables after a marker (a sourced file may print on its own)
_SOURCE = ('. "$1"; for x in "$2"/*.cfg; do if [ -e "$x" ]; then . "$x"; fi; done; '
           'printf "\\n@@grub\\n%s\\n%s\\n" "$GRUB_CMDLINE_LINUX" "$GRUB_CMDLINE_LINUX_DEFAULT"')
_MARK = "\n@@grub\n"
#: the awk program that sets (``word`` = ``name=value`` / ``name``) or removes (``word`` empty) option
#: ``opt`` in the ``GRUB_CMDLINE_LINUX*=`` lines of /etc/default/grub; lines it does not change are
#: printed as they were (restore gives the file back byte for byte)
_AWK = r"""
function norm(s) { gsub(/-/, "_", s); return s }
BEGIN { want = norm(opt); done = 0 }
/^[ \t]*(export[ \t]+)?GRUB_CMDLINE_LINUX(_DEFAULT)?=/ {
  eq = index($0, "="); head = substr($0, 1, eq); val = substr($0, eq + 1); qc = substr(val, 1, 1)
  if (qc == "\"" || qc == "\047") {
    if (length(val) < 2 || substr(val, length(val), 1) != qc) { print; next }
    inner = substr(val, 2, length(val) - 2)
  } else { qc = "\""; inner = val }
  linux = (head ~ /GRUB_CMDLINE_LINUX=$/); n = split(inner, w, /[ \t]+/); out = ""; changed = 0
  for (i = 1; i <= n; i++) {
    if (w[i] == "") continue
    name = w[i]; sub(/=.*/, "", name)
    if (norm(name) == want) {
      changed = 1
      if (linux && word != "" && !done) { out = out (out == "" ? "" : " ") word; done = 1 }
      continue
    }
    out = out (out == "" ? "" : " ") w[i]
  }
  if (linux && word != "" && !done) { out = out (out == "" ? "" : " ") word; done = 1; changed = 1 }
  if (changed) { print head qc out qc; next }
}
{ print }
END { if (word != "" && !done) print "GRUB_CMDLINE_LINUX=\"" word "\"" }
"""
_WORD = re.compile(r'(?:[^\s"]|"[^"]*")+')


def options(cmdline: str) -> dict[str, str]:
    """Options of a kernel command line as the kernel reads them: ``{name: value}`` with ``-`` in a
    name read as ``_``, quotes around a value removed, ``""`` for a bare flag, the last occurrence
    winning; words after ``--`` go to init and are left out."""
    out: dict[str, str] = {}
    for word in _WORD.findall(cmdline):
        if word == "--":
            break
        name, _, value = word.partition("=")
        out[name.replace("-", "_")] = value[1:-1] if len(value) > 1 and value[0] == value[-1] == '"' else value
    return out


def grub_words(output: str) -> str | None:
    """``GRUB_CMDLINE_LINUX`` and ``GRUB_CMDLINE_LINUX_DEFAULT`` (one string) from the output of the
    config-sourcing command, or None when it has no marker (the config could not be read)."""
    if _MARK not in output:
        return None
    linux, _, rest = output.rsplit(_MARK, 1)[1].partition("\n")
    return f"{linux} {rest.splitlines()[0] if rest else ''}".strip()


#: what a word of the boot loader's command line may hold: the inventory grammar's characters
#: (tuning.model.grammar check_cmdline_name / check_cmdline_value) and the ``=`` between them
_SAFE_WORD = re.compile(r"[A-Za-z0-9_.,:/+=-]{1,320}")


def _word(opt: str, value: str) -> str:
    return opt if value == "" else f"{opt}={value}"


def states_off_mask(spec: NodeSpec, facts: NodeFacts) -> int | None:
    """``intel_idle.states_off`` for ``cpu.max_idle_latency_us``: bit K set for every idle state K whose
    exit latency is above the limit; None when the node cannot take it (its cpuidle driver is not
    intel_idle, or intel_idle has no ``states_off`` parameter) or nothing was read."""
    limit, table = spec.cpu.max_idle_latency_us, idle_table(facts)
    if limit is None or not table or facts.raw.get("power/idle_driver") != "intel_idle" \
            or facts.raw.get("cmdline/states_off_param", ABSENT) == ABSENT:
        return None
    return sum(1 << k for k, st in table.items() if st.latency_us > limit)


class CmdlineDomain(Domain):
    """``cmdline/<option>`` -> value in the boot loader config (see the module doc)."""

    name = "cmdline"

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        cfg, cfg_d = q(sysroot_path(sysroot, GRUB_DEFAULT)), q(sysroot_path(sysroot, GRUB_DEFAULT_D))
        lines = [
            f"if [ -f {cfg} ] && command -v update-grub >/dev/null 2>&1; then printf 'cmdline/loader\\tgrub\\n'; "
            "elif command -v grubby >/dev/null 2>&1; then printf 'cmdline/loader\\tgrubby\\n'; "
            "else printf 'cmdline/loader\\tnone\\n'; fi",
            f"b cmdline/grub sh -c {q(_SOURCE)} sh {cfg} {cfg_d} </dev/null",
            f"r cmdline/proc {q(sysroot_path(sysroot, '/proc/cmdline'))}",
        ]
        if spec.cpu.max_idle_latency_us is not None:
            lines += idle_table_script(sysroot) + [f"r cmdline/states_off_param {q(sysroot_path(sysroot, STATES_OFF))}"]
        if spec.cpu.isolate:
            from tuning.node import topology

            lines += topology.read_script(spec, sysroot)
        return lines

    @staticmethod
    def _persisted(facts: NodeFacts) -> dict[str, str] | None:
        raw = facts.raw.get("cmdline/grub", ABSENT)
        words = None if raw == ABSENT else grub_words(decode(raw))
        return None if words is None else options(words)

    @staticmethod
    def _live(facts: NodeFacts) -> dict[str, str]:
        return options(facts.raw.get("cmdline/proc", ""))

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        persisted = self._persisted(facts) or {}
        try:
            keys = list(self.desired(spec, facts))
        except Unfit:  # plan says why; the keys the profile names are still read
            keys = [f"cmdline/{name}" for name in spec.kernel.cmdline]
        return {key: persisted.get(key.split("/", 1)[1].replace("-", "_"), ABSENT) for key in keys}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        for key, problem in overlaps(spec.kernel, spec.cpu, spec.sysctl):
            if key.startswith("kernel.cmdline."):
                raise Unfit(key, problem)
        want = {name: str(v) for name, v in spec.kernel.cmdline.items()}
        loader = facts.raw.get("cmdline/loader")  # None: nothing read (an offline plan)
        if loader is not None and (want or spec.cpu.isolate):
            field = "kernel.cmdline" if want else "cpu.isolate"
            if loader != "grub":
                what = "grubby" if loader == "grubby" else "no boot loader fabtune knows"
                raise Unfit(field, f"this node boots with {what}; fabtune writes the command line through "
                                   f"/etc/default/grub and update-grub (Debian/Ubuntu) only; allowed: leave "
                                   f"{field} unset on this node")
            if self._persisted(facts) is None:
                raise Unfit(field, f"{GRUB_DEFAULT} cannot be read with sh (as update-grub reads it); "
                                   "fix the file first")
        if spec.cpu.isolate and loader is not None:
            try:
                from tuning.node.cpuplan import isolated_cpus
            except ImportError as e:  # pragma: no cover - part of the package
                raise Unfit("cpu.isolate", f"the CPU plan is not available ({e})") from None
            cpus = isolated_cpus(spec, facts)
            want["isolcpus"] = want["nohz_full"] = cpus
        mask = states_off_mask(spec, facts)
        if mask is not None and loader == "grub":
            persisted = self._persisted(facts) or {}
            if mask or "intel_idle.states_off" in persisted:  # 0 is the kernel's default: not added
                want["intel_idle.states_off"] = str(mask)
        return {f"cmdline/{name}": value for name, value in want.items()}

    def effect(self, key: str, before: str | None, after: str, facts: NodeFacts) -> str:
        """``live`` when the running kernel already has ``after`` (only the config was wrong), else
        ``reboot_required``."""
        live = self._live(facts).get(key.split("/", 1)[1].replace("-", "_"))
        return "live" if live == after else "reboot_required"

    def findings(self, device: str, spec: NodeSpec, facts: NodeFacts, current: dict[str, str]) -> list[Finding]:
        """``reboot-required``: an option the boot loader config holds as wanted that the running
        kernel (``/proc/cmdline``) does not have yet."""
        live, out = self._live(facts), []
        try:
            wanted = self.desired(spec, facts)
        except Unfit:  # the plan refuses the profile and says why
            return []
        for key, want in wanted.items():
            opt = key.split("/", 1)[1]
            have = live.get(opt.replace("-", "_"))
            if current.get(key) == want and have != want:
                now = "absent" if have is None else _word(opt, have)
                out.append(Finding(device, self.name, "reboot-required",
                                   f"{_word(opt, want)} is in the boot loader config but not in the running "
                                   f"kernel's command line ({now}): active after the next reboot",
                                   evidence=facts.raw.get("cmdline/proc", "")))
        return out

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str | None:
        opt = key.split("/", 1)[1]
        word = "" if value == ABSENT else _word(opt, value)
        if not _SAFE_WORD.fullmatch(word or opt):
            # the word lands inside GRUB_CMDLINE_LINUX="..." of a file update-grub SOURCES as root: shell
            # quoting of this command cannot protect that context, so anything beyond the inventory
            # grammar (a spec built around it) is refused on the node with nothing written
            why = q(f"fabtune: refusing kernel option {word or opt!r}: outside [A-Za-z0-9_.,:/+=-]")
            return f"{{ echo {why} >&2; false; }}"
        cfg = sysroot_path(sysroot, GRUB_DEFAULT)
        f, new, old = q(cfg), q(cfg + ".fabtune-new"), q(cfg + ".fabtune-old")
        # the new config replaces the old by rename(2), never by rewriting it in place: a script killed
        # at any point leaves /etc/default/grub whole (old or new), and restore edits a whole file
        # (an in-place `cat new > grub` killed mid-way left it empty, and restore's edit of an empty
        # file wrote an empty config). The copy keeps the file's owner and mode.
        return (f"rm -f {new} && cp -p {f} {new} && awk -v opt={q(opt)} -v word={q(word)} {q(_AWK)} {f} > {new} && "
                f"rm -f {old} && cp -p {f} {old} && mv -f {new} {f} && "
                f"{{ update-grub || {{ mv -f {old} {f}; false; }}; }} && rm -f {old}")

    def read_cmd(self, key: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        cfg, cfg_d = q(sysroot_path(sysroot, GRUB_DEFAULT)), q(sysroot_path(sysroot, GRUB_DEFAULT_D))
        return f"sh -c {q(_SOURCE)} sh {cfg} {cfg_d} </dev/null"

    def parse_read(self, key: str, output: str) -> str:
        words = grub_words(output)
        if words is None:
            return ABSENT
        return options(words).get(key.split("/", 1)[1].replace("-", "_"), ABSENT)
