"""Validators of the tests/reports modules: the JSON report against its schema (jsonschema), the
JUnit XML against the Jenkins/Ant ``JUnit.xsd`` (xmlschema; source in README.md), and a reader of
Prometheus textfiles (prometheus-client's own parser)."""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET
from pathlib import Path

XSD = Path(__file__).with_name("JUnit.xsd")


@functools.cache
def _junit_schema():
    import xmlschema

    return xmlschema.XMLSchema(str(XSD))


@functools.cache
def _json_validator():
    import jsonschema

    from tuning.reports.json_report import schema

    s = schema()
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def valid_json(doc: dict) -> dict:
    """``doc`` after it validated against report.schema.json (raises ValidationError otherwise)."""
    _json_validator().validate(doc)
    return doc


def valid_junit(xml: bytes | str) -> dict[str, tuple[str | None, str, str]]:
    """Validate JUnit XML against JUnit.xsd; returns ``{classname/name: (kind, message, text)}``
    with kind None (passed), ``failure``, ``error`` or ``skipped``."""
    text = xml.decode() if isinstance(xml, bytes) else xml
    _junit_schema().validate(text)
    out = {}
    for case in ET.fromstring(text).iter("testcase"):
        kind = next((k for k in ("failure", "error", "skipped") if case.find(k) is not None), None)
        el = case.find(kind) if kind else None
        out[f"{case.get('classname')}/{case.get('name')}"] = (
            kind, el.get("message", "") if el is not None else "", (el.text or "") if el is not None else "")
    return out


def prom_samples(text: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted label items): value}`` of a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}
