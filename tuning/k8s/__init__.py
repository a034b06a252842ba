"""fabtune on Kubernetes (issue 23): node holds through the NVIDIA Maintenance Operator and the
manifests that run node work as a DaemonSet.

- :mod:`tuning.k8s.maintenance`: NodeMaintenance objects (``maintenance.nvidia.com/v1alpha1``) and the
  pure decisions on them: create, join as an additional requestor, leave, report a failure;
- :mod:`tuning.k8s.api`: a small client of the Kubernetes REST API (plain HTTP, the API server's
  ``Status`` errors read into :class:`tuning.k8s.api.ApiError`);
- :mod:`tuning.k8s.client`: a batch's holds through that API (list once, create or join, wait for
  Ready, fail, release), every write read back;
- :mod:`tuning.k8s.manifests`: the DaemonSet, its ConfigMap, RBAC and the node-problem-detector
  custom plugin files that ``fabtune k8s manifests`` writes.

Checked against the published schemas only (no API server, no operator ran): docs/kubernetes.md.
"""
