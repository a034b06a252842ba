"""The subnet manager Target (issue 22): OpenSM on its host, driven through its files and SIGHUP.

What it reads (:meth:`SmTarget.collect`, on the SM host, privileged as the IB diagnostics need the
umad devices): the fabric's HCA ports with their GUIDs and LIDs (``iblinkinfo``), OpenSM's
``partitions.conf`` and ``opensm.conf`` as they are, the routing engine of its last sweep (its log's
``<engine> tables configured on all switches``) and every HCA port's pkey table (``smpquery pkeys -G
<guid> 1``). The plan (:func:`tuning.targets.sm_partitions.plan`) is the diff of the rendered file
against what the SM serves: the file, the SM priority and each port pkey that moves.

The push: the previous files are in the journal before the first write (:meth:`SmTarget.record`:
``snapshot``), the new file written through a temporary file in its folder and a rename (a symlink
or other special file in its place is refused), then SIGHUP to the pid of its pid file (``opensm(8)``
NOTES: on a HUP signal OpenSM starts a new heavy sweep; the sweep reads the partition file and
opensm.conf's runtime options again: measured on the lab); the push waits for the sweep's end
(:meth:`SmTarget._reload`: ``SUBNET UP`` in its log or a rewritten ``opensm-subnet.lst``) and fails
on an ERROR line (``0x01 ->``) the sweep logged that OpenSM did not log before (``parse_part_conf:
PARSE ERROR: line 3: bad partition definition`` / ``Partition configuration in error; retrying with
default config``, always: OpenSM then serves the default policy) or when OpenSM exited. Read back: every
HCA port's pkey table equals the plan's, and ``sminfo`` the priority. Restore: the journaled files
written back the same way, SIGHUP, and the pkey tables read back equal to the journaled ones.

Path records: ``collect`` reads one ``saquery PR`` per partition that asks an ``mtu`` or ``sl``
(between two ports holding its pkey); once the SM serves the inventory's policy (an empty plan),
``findings`` reports a path MTU below the partition's or another SL
(:func:`tuning.targets.sm_partitions.path_findings`): a port's MtuCap and OpenSM's ``qos`` option
decide them, not the file, so they are findings, not read-back failures. The QoS policy file
(``qos_policy``, :mod:`tuning.targets.sm_qos`) is planned, journaled, written and restored with the
partitions file, in the same SIGHUP; its read back is each of its pkeys' path record carrying its SL
(:func:`tuning.targets.sm_qos.read_back`), and its parser's ERROR lines are the push's own. The policy's
SL-to-VL table of the HCA ports is opensm.conf's ``qos_ca_sl2vl`` line, written in the same push and read
back on every HCA port's SL2VL table (:meth:`SmTarget.read_sl2vl`, :func:`tuning.targets.sm_qos.read_back_sl2vl`);
the rows before the push are journaled (``sl2vl_before``) and a restore reads them back.
Left for later (docs/architecture.md): UFM's REST pkeys.
"""

from __future__ import annotations

import base64
import re
import time
from typing import ClassVar

from tuning.errors import (CommandError, CommitError, NotSupportedError, RollbackError, SetupError, TuningError,
                           VerifyError)
from tuning.model.ib_sm import SmSpec
from tuning.model.outcomes import DeviceState
from tuning.node.base import Change, Finding
from tuning.parsers.ib_links import parse_iblinkinfo
from tuning.parsers.ib_sm import (Sl2VlTable, parse_pkeys, parse_portinfo, parse_saquery_pr, parse_sl2vl, parse_sminfo,
                                   umad_line)
from tuning.targets import sm_partitions as sp
from tuning.targets import sm_qos as sq
from tuning.targets.sm_snapshot import FILES, PATHS, snapshot_of  # noqa: F401 (snapshot_of: also the tests')
from tuning.targets.base import DeviceJournal, connection_facts, pause_for_test
from tuning.transport.base import Host, q, sysroot_path
from tuning.transport.connection import Connection

#: the partition and QoS policy parsers' ERROR lines: always the push's, even when OpenSM logged them before
OWN_ERRORS = ("parse_part_conf", "osm_prtn_", *sq.ERRORS)
_ENGINE = re.compile(r"(\S+) tables configured on all switches")
_ABSENT = "-"


class SmTarget:
    """An OpenSM subnet manager (``role: sm``, platform ``opensm``): :class:`tuning.targets.base.Target`.

    Args:
        name: inventory name.  connection: how to reach its host (SSH; an inventory's or a journal's).
        platform: ``opensm``.  device: the inventory device (None when built from a journal record).
        host: an already open :class:`~tuning.transport.base.Host` (the IB lab's local shell:
            :func:`tuning.lab.ib.IbLab.sm_shell`); None: SSH from ``connection``.
    """

    role: ClassVar[str] = "sm"
    reports_findings: ClassVar[bool] = True
    verifiable: ClassVar[bool] = True
    ib_verified: ClassVar[bool] = True  # proven by the IB verification (tuning.verify.ib_sm), not RoCE pairs

    def __init__(self, name: str, connection: Connection, platform: str = "opensm", device=None,
                 host: Host | None = None):
        self.name, self.connection, self.platform, self.device = name, connection, platform, device
        self.host: Host | None = host
        self._given = host is not None

    rdma_host: Host | None = None  # the SM runs no RDMA test

    # --- session --------------------------------------------------------------------------
    def open(self) -> None:
        """SSH to the SM host (host keys checked), unless a shell was given; with ``fabtune_local``
        (the SM runs on this controller, as the IB lab's does) a local shell, privileged commands
        through sudo when the inventory says ``become``. Raises ConnectError."""
        if self._given:
            return
        c = self.connection
        if c.local:
            from tuning.transport.local import LocalHost

            self.host = LocalHost(self.name, c.sysroot, become_user=c.become_user if c.become else None)
            return
        from tuning.transport.ssh import SshHost

        self.host = SshHost(self.name, c)

    def close(self) -> None:
        """Close the SSH session (idempotent; a given shell stays the giver's)."""
        if self.host is not None and not self._given:
            self.host.close()

    def reopen(self) -> None:
        """A new session (a given shell has none to lose)."""
        if not self._given:
            self.close()
            self.open()

    # --- reading --------------------------------------------------------------------------
    def _path(self, paths: dict, field: str) -> str:
        return sysroot_path(self.connection.sysroot or "/", paths[field])

    def run_diag(self, cmd: str, what: str, timeout: float = 60.0) -> str:
        """The stdout of ``cmd``, an infiniband-diags read (``what``: its tool, for errors) on the SM host,
        privileged (the umad devices), within ``timeout`` s: the one path every IB read takes, this
        target's and the burn-in's (:mod:`tuning.burnin.ib_read`). ``cmd`` reaches a shell: only tool
        names, numbers and :func:`~tuning.transport.base.q`-quoted values. Raises SetupError when the host
        cannot run the IB diagnostics at all (the shell's 127: not installed; libibmad's "can't open
        UMAD port": no HCA port or ib_umad there), CommandError for any other failure."""
        res = self.host.run(cmd, timeout=timeout, privileged=True)
        if res.rc != 0:
            said = res.stderr or res.stdout
            if res.rc == 127:
                raise SetupError(f"{what} is not installed there (infiniband-diags): {said.strip()[-200:]}",
                                 host=self.name, phase="sm")
            if "can't open UMAD port" in said:  # libibmad's mad_rpc_open_port (infiniband-diags 3.x)
                raise SetupError(f"{what} finds no InfiniBand port to query ({umad_line(said)}): "
                                 "the SM Target runs on the host of OpenSM and its HCA (ib_umad loaded), or on "
                                 "the IB lab's", host=self.name, phase="sm")
            raise CommandError(what, res.rc, said, host=self.name, phase="sm")
        return res.stdout

    def read_ports(self) -> list[sp.CaPort]:
        """The fabric's Active HCA ports (``iblinkinfo``), sorted by description and port."""
        links = parse_iblinkinfo(self.run_diag("iblinkinfo", "iblinkinfo"))
        ports = [sp.CaPort(p.node, p.port, int(p.port_guid, 16), p.lid) for p in links.ports
                 if p.node_type == "CA" and p.port_guid and p.state == "Active"]
        return sorted(ports, key=lambda p: (p.description, p.port))

    def _per_port(self, guids: list[str], query: str) -> dict[str, str]:
        """Port GUID -> the output of ``smpquery QUERY -G <guid> 1`` (one command for all, the first
        failure stops it). Raises TuningError (as :meth:`run_diag`; a port left unanswered)."""
        if not guids:
            return {}
        loop = " ".join(q(g) for g in guids)
        out = self.run_diag(f"for g in {loop}; do printf '== %s\\n' \"$g\"; smpquery {query} -G \"$g\" 1 || exit; done",
                        f"smpquery {query}")
        texts = dict(chunk.partition("\n")[::2] for chunk in out.split("== ")[1:])
        if sorted(texts) != sorted(guids):
            raise TuningError(f"smpquery {query} answered for {len(texts)} of {len(guids)} ports", host=self.name)
        return texts

    def read_pkeys(self, guids: list[str], caps: dict[str, int] | None = None) -> dict[str, sp.Table]:
        """Port GUID -> its pkey table (``0x7fff`` -> ``full``), ``smpquery pkeys``; ``caps``, when
        given, gets each port's table size (``64 pkeys capacity for this port``). Raises TuningError."""
        tables: dict[str, sp.Table] = {}
        for guid, text in self._per_port(guids, "pkeys").items():
            table = parse_pkeys(text)
            tables[guid] = {sp.pkey_word(e.pkey): table.membership(e.pkey) for e in table.entries}
            if caps is not None and table.capacity is not None:
                caps[guid] = table.capacity
        return tables

    def read_sl2vl(self, guids: list[str]) -> dict[str, Sl2VlTable]:
        """Port GUID -> its SL2VL table (``smpquery sl2vl -G <guid> 1``). Raises TuningError."""
        return {g: parse_sl2vl(text) for g, text in self._per_port(guids, "sl2vl").items()}

    def read_mtu_caps(self, guids: list[str]) -> dict[str, int]:
        """Port GUID -> its PortInfo MtuCap in bytes (``smpquery portinfo``). Raises TuningError."""
        return {g: parse_portinfo(text).mtu_cap_bytes for g, text in self._per_port(guids, "portinfo").items()}

    def read_path_records(self, queries: dict[str, str]) -> dict[str, list]:
        """Label -> the :class:`~tuning.parsers.ib_sm.IbPathRecord` list ``saquery PR ARGS`` answers
        (``queries``: label -> ARGS such as ``--slid 2 --pkey 0x8001``, built from numbers only), one
        command for all; no output is no record (the SA found no path: []). Raises TuningError (as
        :meth:`run_diag`)."""
        if not queries:
            return {}
        cmd = "; ".join(f"printf '== %s\\n' {q(label)} && saquery PR {args} || exit" for label, args in queries.items())
        return {label: parse_saquery_pr(text).records if text.strip() else []
                for label, text in (c.partition("\n")[::2] for c in self.run_diag(cmd, "saquery PR").split("== ")[1:])}

    def _files(self, paths: dict) -> tuple[dict[str, str | None], str | None]:
        """``({path: text or None when absent}, routing engine of the last sweep or None)``."""
        shown = [paths[f] for f in FILES]
        reads = "; ".join(f"if [ -f {q(self._path(paths, f))} ]; then base64 -w0 {q(self._path(paths, f))}; echo; "
                          f"else echo {_ABSENT}; fi" for f in FILES)
        log = q(self._path(paths, "opensm_log_file"))
        out = self.run_diag(f"{reads}; grep -Eo {q(_ENGINE.pattern)} {log} | tail -n1 || true", "read OpenSM's files")
        lines = out.split("\n")
        files = {p: (None if v == _ABSENT else base64.b64decode(v).decode()) for p, v in zip(shown, lines)}
        engine = _ENGINE.fullmatch(lines[len(FILES)].strip()) if len(lines) > len(FILES) else None
        return files, engine.group(1) if engine else None

    def collect(self, domains: set[str] | None = None) -> dict:
        """What the SM serves: ``ports`` (:class:`~tuning.targets.sm_partitions.CaPort`), ``files``
        (path -> text | None), ``partitions`` (the partitions file's text, "" when absent),
        ``sm_priority`` (opensm.conf's, a string, None when unset), ``routing_engine``, ``pkeys``
        (port GUID -> table) and ``pkey_caps`` (port GUID -> its P_Key table's size); with a policy ``ca_sl2vl`` also ``sl2vl`` (HCA port GUID -> its SL2VL row, what a
        restore reads back). Raises TuningError (CommandError, ParseError)."""
        spec: SmSpec = self.device.spec
        paths = spec.model_dump(include=set(PATHS))
        files, engine = self._files(paths)
        ports = self.read_ports()
        conf = files[paths["opensm_conf_file"]] or ""
        prio = next((x.split()[1] for x in conf.splitlines() if x.startswith("sm_priority ") and len(x.split()) == 2), None)
        caps: dict[str, int] = {}
        state = {"paths": paths, "files": files, "partitions": files[paths["opensm_partitions_file"]] or "",
                 "sm_priority": prio, "routing_engine": engine, "ports": ports,
                 "pkeys": self.read_pkeys([f"{p.guid:#018x}" for p in ports], caps), "pkey_caps": caps}
        state["path_records"] = self._path_records(sp.path_pairs(spec, state))
        if spec.qos_policy is not None and spec.qos_policy.ca_sl2vl is not None:
            state["sl2vl"] = {g: t.rows.get((0, 0)) for g, t in self.read_sl2vl(sorted(state["pkeys"])).items()}
        return state

    def _path_records(self, pairs: dict[str, tuple[int, int, int]]) -> dict[str, dict]:
        """Partition -> its path record's ``mtu_bytes``, ``sl``, ``slid``, ``dlid`` (``saquery PR``, one command)."""
        read = self.read_path_records({name: f"--src-to-dst {s}:{d} --pkey {pk:#06x}" for name, (s, d, pk) in pairs.items()})
        return {name: {"mtu_bytes": prs[0].mtu_bytes, "sl": prs[0].sl, "slid": prs[0].slid, "dlid": prs[0].dlid}
                for name, prs in read.items()}

    def plan(self, state: dict, domains: set[str] | None = None) -> list[Change]:
        """:func:`tuning.targets.sm_partitions.plan` (the ``sm`` domain). Raises InputError."""
        if domains is not None and sp.DOMAIN not in domains:
            return []
        return (sp.plan(self.name, self.device.spec, state, self.device.sources.get("partitions", "inventory"))
                + sq.plan(self.name, self.device.spec, state["files"], sp.DOMAIN))

    def findings(self, state: dict, domains: set[str] | None = None) -> list[Finding]:
        """:func:`tuning.targets.sm_partitions.findings` of the plan from ``state``, then
        :func:`tuning.targets.sm_qos.findings` (a QoS policy OpenSM's ``qos`` option ignores)."""
        if domains is not None and sp.DOMAIN not in domains:
            return []
        changes = self.plan(state)
        # path records are judged once the SM serves the inventory's policy (before, they show the old one)
        paths = [] if changes else sp.path_findings(self.name, self.device.spec, state)
        conf = state["files"].get(state["paths"]["opensm_conf_file"]) or ""
        return (sp.findings(self.name, self.device.spec, state, changes) + paths
                + sq.findings(self.name, self.device.spec, conf, sp.DOMAIN))

    @classmethod
    def fleet_findings(cls, states: dict, domains: set[str] | None = None, devices: dict | None = None) -> list[Finding]:
        """None across SMs (one master per subnet is the SM's own election; ``devices`` unused)."""
        return []

    @classmethod
    def rendered(cls, dev) -> tuple[str, str]:
        """Not without the fabric: the members' port GUIDs are read from it. Raises NotSupportedError."""
        raise NotSupportedError("partitions.conf names the members' port GUIDs, read from the fabric: "
                                "run fabtune plan against the SM", host=dev.name)

    @classmethod
    def offline_plan(cls, dev, domains: set[str] | None = None) -> tuple[list[Change], list[Finding]]:
        """Nothing planned offline; a ``needs-device`` finding (the GUIDs come from the fabric)."""
        return [], [Finding(dev.name, sp.DOMAIN, "needs-device", "partitions.conf names the members' port GUIDs, "
                            "read from the fabric: not planned offline (run plan without --offline)", "")]

    def record(self, state: dict) -> dict:
        """The snapshot a restore needs alone: ``role``, ``platform``, connection facts and
        ``snapshot``: the file paths, the files as they were (``files_before``: path -> text | None),
        the ports (``ports``: GUID -> ``node01 mlx5_0/1``), their pkey tables (``pkeys_before``) and
        opensm.conf's ``sm_priority_before`` and, with a policy ``ca_sl2vl``, the HCA ports' SL2VL rows
        (``sl2vl_before``); checked again before a restore (:func:`snapshot_of`)."""
        snap = {"paths": state["paths"], "files_before": state["files"],
                "ports": {f"{p.guid:#018x}": p.name for p in state["ports"]}, "pkeys_before": state["pkeys"],
                "sm_priority_before": state["sm_priority"]}
        if "sl2vl" in state:  # a policy with ca_sl2vl: the HCA ports' SL2VL rows, read back by a restore
            snap["sl2vl_before"] = state["sl2vl"]
        return {"role": self.role, "platform": self.platform, "connection": connection_facts(self.connection),
                "snapshot": snap}

    # --- writing --------------------------------------------------------------------------
    def _write(self, path: str, text: str | None) -> str:
        """The command that puts ``text`` at ``path`` (None: removes it): a temporary file in the same
        folder and a rename; refused when ``path`` is a symlink or not a regular file."""
        f = q(path)
        guard = (f"if [ -L {f} ] || {{ [ -e {f} ] && [ ! -f {f} ]; }}; then "
                 f"echo {q('fabtune: ' + path + ' is not a regular file: not written')} >&2; exit 1; fi")
        if text is None:
            return f"{guard}; rm -f {f}"
        data = base64.b64encode(text.encode()).decode()
        return (f"{guard}; t=$(mktemp {q(path + '.fabtune-XXXXXX')}) && printf %s {data} | base64 -d > \"$t\" "
                f"&& chmod 0644 \"$t\" && mv -f \"$t\" {f}")

    def _reload(self, paths: dict, files: dict[str, str | None]) -> str:
        """Write ``files``, SIGHUP OpenSM and wait for the heavy sweep it starts; returns what OpenSM
        logged since. The sweep's end is ``SUBNET UP`` in the log or a new ``opensm-subnet.lst``
        (rewritten at each heavy sweep's end): with OpenSM's default ``force_log_flush FALSE`` its
        INFO lines stay in its buffer, while ERROR lines (``0x01``) are written at once (both
        measured on the lab's OpenSM). An ERROR line OpenSM logged before the push too (the last 64 KiB
        of its log) is its standing noise, not the push's (``qos TRUE`` without a QoS policy file logs
        ``osm_qos_parse_policy_file: ERR AC01`` at every sweep, and only then does a partition's ``sl``
        reach path records: measured), except the partition parser's (:data:`OWN_ERRORS`). Raises
        CommitError: a write refused, no OpenSM, an ERROR line, no sweep within 30 s, OpenSM gone."""
        pid, log = q(self._path(paths, "opensm_pid_file")), q(self._path(paths, "opensm_log_file"))
        lst = q(self._path(paths, "opensm_subnet_list_file"))
        writes = " && ".join(f"{{ {self._write(sysroot_path(self.connection.sysroot or '/', p), t)}; }}"
                             for p, t in files.items())
        swept = f"[ \"$(stat -c %y {lst} 2>/dev/null)\" != \"$m\" ]"
        cmd = (f"p=$(cat {pid}) && [[ $p =~ ^[0-9]+$ ]] && kill -0 \"$p\" || {{ echo 'fabtune: no running OpenSM in "
               f"'{pid} >&2; exit 1; }}; n=$(stat -c %s {log}) || exit; m=$(stat -c %y {lst} 2>/dev/null); "
               f"s=$((n>65536?n-65536:0)); o=$(tail -c +$((s+1)) {log} | head -c $((n-s)) | grep -F ' 0x01 -> '); "
               f"{writes} || exit; kill -HUP \"$p\" || exit; "
               f"for i in $(seq 300); do t=$(tail -c +$((n+1)) {log}); case $t in *'SUBNET UP'*) break;; "
               f"esac; {swept} && break; kill -0 \"$p\" 2>/dev/null || break; sleep 0.1; done; "
               f"printf '%s\\n== fabtune: new\\n' \"$o\"; tail -c +$((n+1)) {log}; "
               f"echo; {swept} && echo '== fabtune: swept' || echo '== fabtune: no sweep'; "
               f"kill -0 \"$p\" 2>/dev/null || {{ echo 'fabtune: OpenSM exited after SIGHUP' >&2; exit 3; }}")
        res = self.host.run(cmd, timeout=60.0, privileged=True)
        if res.rc != 0:
            raise CommitError(f"OpenSM re-read: {(res.stderr or res.stdout).strip()[-300:]}", host=self.name, phase="sm")
        before, _, logged = res.stdout.partition("== fabtune: new\n")
        standing = {x.split(" -> ", 1)[1] for x in before.splitlines() if " 0x01 -> " in x}
        errors = [m for x in logged.splitlines() if " 0x01 -> " in x
                  and ((m := x.split(" -> ", 1)[1]) not in standing or m.startswith(OWN_ERRORS))]
        if errors:
            raise CommitError(f"OpenSM refused the new files: {' / '.join(errors[:3])}", host=self.name, phase="sm")
        if "SUBNET UP" not in logged and not logged.rstrip().endswith("== fabtune: swept"):
            raise CommitError(f"no heavy sweep within 30 s of SIGHUP: no SUBNET UP in {paths['opensm_log_file']} "
                              f"and {paths['opensm_subnet_list_file']} not rewritten", host=self.name, phase="sm")
        return logged

    def _read_back(self, ports: dict[str, str], want: dict[str, sp.Table], prio: str | None) -> None:
        """Every port's pkey table equals ``want`` and sminfo the priority ``prio`` (a few reads: the
        SM programs the ports during the sweep). Raises VerifyError naming the first port that differs."""
        for attempt in range(5):
            have = self.read_pkeys(sorted(ports))
            bad = [g for g in sorted(ports) if have.get(g) != want.get(g)]
            if not bad:
                break
            time.sleep(0.3)
        else:
            g = bad[0]
            raise VerifyError(f"{len(bad)} port(s) hold other pkeys than planned; {ports[g]}: read {have.get(g)}, "
                              f"want {want.get(g)}", host=self.name, phase="sm")
        if prio is not None:
            info = parse_sminfo(self.run_diag("sminfo", "sminfo"))
            if str(info.priority) != prio:
                raise VerifyError(f"sminfo reads priority {info.priority}, want {prio}", host=self.name, phase="sm")

    def push(self, changes: list[Change], journal: DeviceJournal, confirm_s: int | None = None) -> list[Change]:
        """See the contract: ``pushing`` journaled, files written, SIGHUP, read back; ``unchanged``
        and [] when the plan is empty. On failure ``failed`` and the error raised (the caller restores).
        Test stage ``apply-sm`` (:func:`~tuning.targets.base.pause_for_test`): OpenSM has re-read the
        files, nothing read back or journaled since ``pushing``."""
        rec = snapshot_of(self.name, journal.get())
        if not changes:
            journal.update(state=DeviceState.UNCHANGED)
            return []
        journal.update(state=DeviceState.PUSHING, changes=[c.as_dict() for c in changes])
        files = sp.files_after(rec, changes)
        want = sp.tables_after(rec, changes)
        prio = next((c.after for c in changes if c.key == sp.PRIORITY_KEY), None)
        try:
            self._reload(rec["paths"], files)
            pause_for_test("apply-sm", journal.run_id)
            self._read_back(rec["ports"], want, prio)
            for c in (c for c in changes if c.key == sq.FILE_KEY and c.after is not None):
                sq.read_back(self, c.after)
            for c in (c for c in changes if c.key == sq.SL2VL_KEY):
                sq.read_back_sl2vl(self, {g: [int(x) for x in c.after.split(",")] for g in rec["ports"]})
        except TuningError:
            journal.update(state=DeviceState.FAILED, applied=[c.as_dict() for c in changes])
            raise
        journal.update(state=DeviceState.APPLIED, applied=[c.as_dict() for c in changes])
        return changes

    def confirm(self, record: dict) -> bool:
        """Nothing to confirm: the SM serves the files once read back."""
        return False

    def preflight(self, record: dict) -> str | None:
        """Whether OpenSM runs (its pid file names a live process)."""
        snap = snapshot_of(self.name, record)
        pid = q(self._path(snap["paths"], "opensm_pid_file"))
        res = self.host.run(f"p=$(cat {pid}) && [[ $p =~ ^[0-9]+$ ]] && kill -0 \"$p\"", timeout=30, privileged=True)
        return None if res.rc == 0 else f"no running OpenSM in {snap['paths']['opensm_pid_file']}"

    def restore(self, record: dict, irreversible: bool = False) -> list[str]:
        """The journaled files written back, SIGHUP, and the ports' pkey tables, the priority and (a
        journal that holds them) the HCA ports' SL2VL rows read back equal to the journaled ones (``record``
        alone). Raises RollbackError."""
        snap = snapshot_of(self.name, record)
        try:
            self._reload(snap["paths"], snap["files_before"])
            self._read_back(snap["ports"], snap["pkeys_before"], snap["sm_priority_before"])
            if snap.get("sl2vl_before"):
                sq.read_back_sl2vl(self, snap["sl2vl_before"], "the journal's (before the push)")
        except TuningError as e:
            raise RollbackError(f"OpenSM not restored: {e}", host=self.name, phase="restore") from e
        return []
