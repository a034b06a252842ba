"""JUnit XML of a run, in the Apache Ant / Jenkins format (the ``JUnit.xsd`` of
windyroad/JUnit-Schema, which tests/reports validates every file against).

Drawn from the run's report document (:func:`tuning.reports.json_report.build`):

- suite ``devices`` (package ``fabtune.<mode>``): one test case per selected device, classname
  ``fabtune.<mode>.<role>``. A device whose apply failed, or that was changed and then restored
  (the run was rolled back), is a ``<failure>``; a device that did not answer is an ``<error>``
  (type ``unreachable``), never a failure; a device the run stopped before is ``<skipped>``, and
  so is a device the run never pushed (outcome ``not-run``: it halted before its batch).
  A run-level error (a lost session, a refused confirm, an exception with no device) adds a test
  case ``run`` with an ``<error>``.
- suite ``verification``: one test case per judged pair (:func:`~tuning.reports.json_report.judged_pairs`),
  classname ``fabtune.<mode>.pair.<path>`` (``leaf`` / ``spine``). A failing pair is a
  ``<failure>`` whose message is its reasons and whose text is measured vs threshold and
  baseline; a pair whose test did not run (connection, QP transition, GID, timeout) is an ``<error>``
  whose message is ``did not run: <error_kind>: <cause>``.
- suite ``incast``: one test case per k-to-1 incast (``doc["incast"]``, :mod:`tuning.verify.incast`),
  named ``leaf01: 3->node01:mlx5_0``, classname ``fabtune.<mode>.incast``. A failing incast is a
  ``<failure>`` (type ``incast-failed``) whose message is its reasons (the counters that rose, the
  pause or CNP that did not, the starved sender) and whose text is its evidence; an incast that
  did not run is an ``<error>`` (type ``test-not-run``).

- suite ``infiniband``: one test case per InfiniBand check (``doc["ib_checks"]``,
  :mod:`tuning.verify.ib_sm`: a partition's pkeys on its member ports, one member pair's path
  record), named as the check (``ib tenant1 0x0001 pkeys``), classname ``fabtune.<mode>.ib.<check>``
  (``pkeys`` / ``path`` / ``harness``). A failing check is a ``<failure>`` (type ``ib-check-failed``)
  whose message is its reasons, the values read; a check that ran nothing is an ``<error>`` (type
  ``test-not-run``); what each passing one read is a line of the suite's ``<system-out>``. The
  suite's counts are the report's ``summary``.

Every file holds at least one test case: a run with neither devices nor pairs gets a ``run``
case that fails unless the run's exit code is 0 (a report that tested nothing is not a pass).
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

from tuning.model.outcomes import BatchOutcome, DeviceOutcome, PairOutcome, RunOutcome

#: characters XML 1.0 cannot carry (control characters other than tab, newline, carriage return)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: object) -> str:
    """``value`` as XML-safe text: characters XML 1.0 forbids are written as ``\\xNN``."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def _num(v: float | None, digits: int, unit: str) -> str:
    return "-" if v is None else f"{v:.{digits}f} {unit}"


def _pair_detail(p: dict, th: dict | None) -> str:
    """Measured vs threshold and baseline of one pair, one fact per line."""
    lines = [f"measured: bandwidth {_num(p.get('bw_gbps'), 1, 'Gb/s')}, latency {_num(p.get('lat_us'), 2, 'us')} "
             f"(p99 {_num(p.get('lat_p99_us'), 2, 'us')}), RoCE MTU {p.get('mtu_bytes') or '-'} B "
             f"(every hop allows {p.get('mtu_allowed') or '-'} B)"]
    if th:
        lines.append(f"thresholds: bandwidth >= {th['min_bw_gbps']:g} Gb/s, latency <= {th['max_lat_us']:g} us; "
                     f"regression: bandwidth drop > {th['bw_drop_pct']:g} %, latency rise > {th['lat_rise_pct']:g} %")
    if p.get("baseline_bw_gbps") is not None or p.get("baseline_lat_us") is not None:
        lines.append(f"baseline: bandwidth {_num(p.get('baseline_bw_gbps'), 1, 'Gb/s')}, "
                     f"latency {_num(p.get('baseline_lat_us'), 2, 'us')}")
    lines.append(f"path: {p.get('path')}; client {p.get('client_nic')} ({p.get('client_link')}), "
                 f"server {p.get('server_nic')} ({p.get('server_link')})")
    return "\n".join(lines)


def _case(suite: ET.Element, name: str, classname: str, kind: str | None = None, type_: str = "",
          message: str = "", text: str = "") -> None:
    """Append a test case; ``kind``: None (passed), ``failure``, ``error`` or ``skipped``."""
    case = ET.SubElement(suite, "testcase", name=_text(name), classname=_text(classname), time="0")
    if kind == "skipped":
        ET.SubElement(case, "skipped", message=_text(message))
    elif kind:
        el = ET.SubElement(case, kind, type=_text(type_), message=_text(message))
        el.text = _text(text) if text else None


def _device_case(suite: ET.Element, doc: dict, d: dict) -> None:
    cls = f"fabtune.{doc['mode']}.{d['role']}"
    mine = doc["changes"].get(d["name"], [])
    changed = "\n".join(f"{c['key']}: {c['before']} -> {c['after']}" for c in mine)
    o = d["outcome"]
    if o == DeviceOutcome.FAILED:
        _case(suite, d["name"], cls, "failure", "apply-failed", d["error"] or "apply failed",
              f"restored: {'yes' if d['restored'] else 'no'}\n{changed}")
    elif o == DeviceOutcome.RESTORED:
        kept = f"; kept (not undone automatically): {', '.join(d['kept'])}" if d["kept"] else ""
        _case(suite, d["name"], cls, "failure", "restored",
              f"changed, then restored: the run was rolled back{kept}", changed)
    elif o == DeviceOutcome.CHANGED and doc["outcome"] == RunOutcome.ROLLED_BACK:
        _case(suite, d["name"], cls, "failure", "not-restored",
              "changed, and the rollback did not report it restored: check the device", changed)
    elif o in (DeviceOutcome.UNREACHABLE, DeviceOutcome.ERROR):
        _case(suite, d["name"], cls, "error", o if o == "unreachable" else (doc["error"] or {}).get("type", "error"),
              d["error"] or o)
    elif o == "unknown":
        _case(suite, d["name"], cls, "skipped", message=d["error"] or "no result")
    elif o == "not-run":
        _case(suite, d["name"], cls, "skipped", message=f"not run: the run stopped before pushing it "
              f"({len(mine)} change(s) planned, none pushed)")
    else:
        _case(suite, d["name"], cls)


def _suite(root: ET.Element, doc: dict, name: str, idx: int, seconds: float) -> ET.Element:
    started = (doc.get("started") or "1970-01-01T00:00:00")[:19]
    suite = ET.SubElement(root, "testsuite", name=name, package=f"fabtune.{doc['mode']}", id=str(idx),
                          timestamp=started, hostname=_text(socket.gethostname() or "localhost"),
                          time=f"{max(0.0, seconds):.3f}")
    props = ET.SubElement(suite, "properties")
    for key in ("run_id", "command", "mode", "outcome", "exit_code", "inventory", "n_changes"):
        if doc.get(key) is not None:
            ET.SubElement(props, "property", name=key, value=_text(doc[key]))
    for name, value in _batch_properties(doc.get("batches") or []):
        ET.SubElement(props, "property", name=name, value=_text(value))
    return suite


def _batch_properties(batches: list[dict]) -> list[tuple[str, str]]:
    """``batches`` (count), ``batch.N`` (``kept``; ``restored; failed leaf01; unreachable node03``)
    and ``halted_at`` (the batch the run halted in) of a run in more than one batch."""
    if len(batches) < 2:
        return []
    out = [("batches", str(len(batches)))]
    for b in batches:
        extra = [f"failed {' '.join(b['failed'])}" if b.get("failed") else "",
                 f"unreachable {' '.join(b['unreachable'])}" if b.get("unreachable") else ""]
        out.append((f"batch.{b['index']}", "; ".join([b.get("outcome") or BatchOutcome.NOT_RUN, *[e for e in extra if e]])))
    halted = next((b for b in batches if b.get("halt")), None)
    if halted:
        out.append(("halted_at", f"{halted['index']}: {halted['halt']}"))
    return out


def _finish(suite: ET.Element, out: str, err: str = "") -> None:
    """Counts on the suite (tests, failures, errors, skipped) and its system-out / system-err."""
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for kind, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(1 for c in cases if c.find(kind) is not None)))
    ET.SubElement(suite, "system-out").text = _text(out)
    ET.SubElement(suite, "system-err").text = _text(err) if err else None


def _run_error(doc: dict) -> str | None:
    """A run-level error: the error that stopped the run without naming a device, or RunReport's ``run`` error."""
    if doc.get("error") and not doc["error"].get("host"):
        return f"{doc['error']['type']}: {doc['error']['message']}"
    return doc.get("errors", {}).get("run")


def _incast_suite(root: ET.Element, doc: dict) -> None:
    """Suite ``incast``: one test case per incast (see the module docstring)."""
    suite = _suite(root, doc, "incast", 2, 0.0)
    cls = f"fabtune.{doc['mode']}.incast"
    for r in doc["incast"]:
        detail = "\n".join(r.get("evidence") or [])
        if r.get("error"):
            _case(suite, r["incast"], cls, "error", "test-not-run", r["error"], detail)
        elif r.get("verdict") == "fail":
            _case(suite, r["incast"], cls, "failure", "incast-failed", "; ".join(r.get("reasons") or []), detail)
        else:
            _case(suite, r["incast"], cls)
    bad = sum(1 for r in doc["incast"] if r.get("verdict") == "fail")
    _finish(suite, f"{len(doc['incast'])} incast(s): {len(doc['incast']) - bad} passed, {bad} failed")


def _ib_suite(root: ET.Element, doc: dict) -> None:
    """Suite ``infiniband``: one test case per IB check (see the module docstring)."""
    suite = _suite(root, doc, "infiniband", 3, 0.0)
    for r in doc["ib_checks"]:
        cls = f"fabtune.{doc['mode']}.ib.{r['check']}"
        if r["outcome"] == PairOutcome.ERROR:
            _case(suite, r["pair"], cls, "error", "test-not-run", f"did not run: {r.get('error_kind')}: {r.get('error')}")
        elif r["outcome"] == PairOutcome.FAIL:
            _case(suite, r["pair"], cls, "failure", "ib-check-failed", "; ".join(r.get("reasons") or []),
                  "\n".join(r.get("reasons") or []))
        else:
            _case(suite, r["pair"], cls)
    s = doc["summary"]
    read = [f"{r['pair']}: {'; '.join(r.get('judged') or [])}" for r in doc["ib_checks"] if r.get("judged")]
    _finish(suite, "\n".join([f"{s['ib_checks']} IB check(s): {s['ib_checks_passed']} passed, {s['ib_checks_failed']} "
                               f"failed, {s['ib_checks_errored']} did not run", *read]))


def to_xml(doc: dict) -> bytes:
    """The JUnit XML (UTF-8, with declaration) of one report document."""
    root = ET.Element("testsuites")
    head = (f"fabtune {doc['command']} run {doc.get('run_id') or '(no journal)'}: {doc['outcome']}, "
            f"{doc['n_changes']} change(s), exit {doc['exit_code']}")
    suite = _suite(root, doc, "devices", 0, doc.get("seconds") or 0.0)
    for d in doc["devices"]:
        _device_case(suite, doc, d)
    if (err := _run_error(doc)) is not None:
        _case(suite, "run", f"fabtune.{doc['mode']}.run", "error", (doc.get("error") or {}).get("type", "run"), err)
    changes = [f"{n} {c['key']}: {c['before']} -> {c['after']}" for n, cs in doc["changes"].items() for c in cs]
    if not doc["devices"] and err is None and not doc["pairs"] and not doc.get("incast") and not doc.get("ib_checks"):
        ok = doc["exit_code"] == 0
        _case(suite, "run", f"fabtune.{doc['mode']}.run", None if ok else "failure", "run-failed",
              f"{doc['outcome']}, exit {doc['exit_code']}")
    _finish(suite, "\n".join([head, *changes]), err or "")
    if doc["pairs"]:
        ver = _suite(root, doc, "verification", 1, 0.0)
        for p in doc["pairs"]:
            cls = f"fabtune.{doc['mode']}.pair.{p.get('path') or 'unknown'}"
            if p["outcome"] == PairOutcome.ERROR:
                _case(ver, p["pair"], cls, "error", "test-not-run",
                      f"did not run: {p.get('error_kind') or 'unknown'}: {p.get('error') or 'no result'}",
                      _pair_detail(p, doc.get("thresholds")))
            elif p["outcome"] == "fail":
                _case(ver, p["pair"], cls, "failure", "verification-failed", "; ".join(p.get("reasons") or []),
                      _pair_detail(p, doc.get("thresholds")))
            else:
                _case(ver, p["pair"], cls)
        s = doc["summary"]
        _finish(ver, f"{s['pairs']} pair(s): {s['pairs_passed']} passed, {s['pairs_failed']} failed, "
                     f"{s['pairs_errored']} did not run")
    if doc.get("incast"):
        _incast_suite(root, doc)
    if doc.get("ib_checks"):
        _ib_suite(root, doc)
    ET.indent(root)
    return ET.tostring(root, encoding="UTF-8", xml_declaration=True) + b"\n"


def write(doc: dict, path: Path) -> None:
    """Write :func:`to_xml` of ``doc`` to ``path``, atomically."""
    from tuning.outfile import write_atomic

    write_atomic(path, to_xml(doc))
