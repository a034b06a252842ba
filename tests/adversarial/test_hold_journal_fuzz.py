"""Issue 23 tryout: hand-edited ``slurm_holds`` / ``k8s`` journal records of the wrong shape are
one InputError naming the key, never a TypeError or a non-ASCII job id reaching scancel."""

from __future__ import annotations

import pytest

from tuning.errors import InputError
from tuning.k8s.leftovers import _checked
from tuning.slurm_holds import journaled

WRONG = [None, 1, 1.5, True, "x", [1], [[None]]]
SLURM = ([v for v in WRONG if v] + [{"²": {"nodes": []}}, {"０１２": {"nodes": []}}, {"9" * 5000: {"nodes": []}}]
         + [{"42": {"nodes": v}} for v in WRONG if v] + [{"42": {"drained": v}} for v in WRONG if v]
         + [{"42": {"nodes": [n]}} for n in (None, 1, "node 01", "../x")])
K8S = ([{"namespace": "fabtune", "holds": v} for v in WRONG if v]
       + [{"namespace": "fabtune", "holds": {"node01": v}} for v in WRONG]
       + [{"namespace": "fabtune", "holds": {"node01": {"name": "nm", "created": "yes"}}}]
       + [{"namespace": "fabtune", "configmaps": v} for v in WRONG if v]
       + [{"namespace": "fabtune", "configmaps": [1]}])


@pytest.mark.parametrize("rec", SLURM, ids=range(len(SLURM)))
def test_slurm_record_wrong_shape_is_input_error(rec):
    with pytest.raises(InputError, match="slurm_holds"):
        journaled({"slurm_holds": rec})


@pytest.mark.parametrize("rec", K8S, ids=range(len(K8S)))
def test_k8s_record_wrong_shape_is_input_error(rec):
    with pytest.raises(InputError, match="k8s"):
        _checked(rec)
