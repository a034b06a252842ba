"""``--json`` reports (:func:`tuning.cli_emit.dump_report`): the document ``json.dump`` gave, parsed
equal, each change of ``changes`` / ``kept`` one line of compact JSON (CPython's C encoder: issue 24,
an offline plan of 10,016 nodes spent 50 of its 60 CPU seconds in the pure-Python one), the rest
indented, values JSON cannot hold written as their ``str``."""

from __future__ import annotations

import io
import json
from pathlib import Path

from tuning.cli_emit import dump_report


def _dumped(doc: dict) -> str:
    f = io.StringIO()
    dump_report(doc, f)
    return f.getvalue()


def test_the_document_is_json_dumps_own_with_one_line_per_change():
    change = {"device": "node01", "domain": "mtu", "key": "mtu/enp12s0np0", "before": None, "after": "9000",
              "tags": ["mtu-raise"]}
    doc = {"run_id": None, "mode": "offline-plan", "changes": {"node01": [change, {**change, "after": "4096"}],
                                                              "leaf01": []},
           "kept": {}, "batches": [{"index": 1, "nodes": ["node01"]}], "path": Path("/x"), "errors": {}}
    text = _dumped(doc)
    assert json.loads(text) == json.loads(json.dumps(doc, default=str))
    assert f"      {json.dumps(change)},\n" in text and '"leaf01": []' in text and '"path": "/x"' in text
    assert text.startswith('{\n  "run_id": null,\n') and text.endswith("\n}\n")
    assert '    {\n      "index": 1,' in text  # the rest keeps json.dump's indent
    assert _dumped({}) == "{}\n" and json.loads(_dumped({"changes": {}})) == {"changes": {}}
