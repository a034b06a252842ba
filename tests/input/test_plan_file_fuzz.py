"""Generated plan files (``fabtune node apply|verify --plan``, issue 23): any JSON document, or a
plan report with any value in any of its places, is either this node's changes of strings or one
:class:`InputError` of one printable line naming the file; never another exception, never a
change of another node, never a value that is not a string or null."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuning.errors import InputError
from tuning.rollout import plan_file

RUN = "20261204T2200-abcdef"
NODE = "node01"
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)
GOOD = {"domain": "mtu", "key": "mtu/enp12s0np0", "before": "1500", "after": "9000"}
FIELDS = ("domain", "key", "before", "after", "device")


@st.composite
def documents(draw):
    """A plan report with one place replaced by any JSON value, or any JSON document."""
    change = dict(GOOD)
    doc = {"mode": "plan", "run_id": RUN, "changes": {NODE: [change, {**GOOD, "key": "mtu/enp18s0np0"}]}}
    where = draw(st.sampled_from(["field", "change", "list", "changes", "run_id", "mode", "device", "whole"]))
    value = draw(JSON)
    if where == "field":
        change[draw(st.sampled_from(FIELDS))] = value
    elif where == "change":
        doc["changes"][NODE][1] = value
    elif where == "list":
        doc["changes"][NODE] = value
    elif where == "changes":
        doc["changes"] = value
    elif where in ("run_id", "mode"):
        doc[where] = value
    elif where == "device":
        doc["changes"][draw(st.text(max_size=20))] = value
    else:
        doc = value
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents(), domains=st.sampled_from([None, {"mtu"}, {"sysctl"}]), need=st.booleans())
def test_a_generated_plan_file_is_this_nodes_changes_or_one_named_refusal(tmp_path, doc, domains, need):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    try:
        got = plan_file.read(path, NODE, RUN, domains, need=need)
    except InputError as e:
        line = str(e)
        assert line.startswith(f"{path}: ") or line.startswith(f"--plan: {path}"), line
        assert line.isprintable() and "\n" not in line, line
        return
    assert isinstance(got, list) and (got or not need)
    for c in got:
        assert set(c) == {"domain", "key", "before", "after"} and isinstance(c["key"], str) and c["key"].isprintable()
        assert all(c[f] is None or isinstance(c[f], str) for f in ("before", "after"))
        assert domains is None or c["domain"] in domains
