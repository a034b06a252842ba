"""The dry path of a rollout on Kubernetes (``fabtune k8s plan``): the rollout's batches
(:func:`tuning.rollout.batches.plan_batches`, the same cut and policy as ``fabtune rollout``) and, per
batch node, the NodeMaintenance fabtune would create or the existing one it would join
(:func:`tuning.k8s.maintenance.decide`). Offline it assumes no object exists (every node: create);
given a client it reads the cluster's NodeMaintenances once (GET only) and decides as a run would.
Nothing is written either way. The switches of a batch are the controller's, never held through
Kubernetes.
"""

from __future__ import annotations

from tuning.k8s import maintenance as nm


def plan(inv, run_id: str, namespace: str, client=None) -> dict:
    """The dry plan (module docstring).

    Args:
        inv: the Inventory.  client: a :class:`tuning.k8s.client.MaintenanceClient` of this run and
            namespace, or None (offline).

    Returns:
        ``{"command": "k8s plan", "run_id": RUN, "namespace": "fabtune", "requestor_id": "fabtune.io",
        "read_cluster": False, "batches": [{"index": 1, "why": "canary: 1 node(s) of leaf01 (serial 1)",
        "switches": ["leaf01"], "nodes": [{"node": "node01", "action": "create", "namespace": "fabtune",
        "name": "fabtune-...-node01", "requestor": "fabtune.io", "why": "", "object": {...}}]}]}``;
        ``action`` create | join | have | refuse, ``object`` the body a create or join would send.

    Raises:
        InputError: a node name Kubernetes cannot have, a batch order that cannot be made safe.
        ApiError, ConnectError: the cluster could not be read (with a client).
    """
    from tuning.rollout.batches import plan_batches

    batches = plan_batches(inv, list(inv.devices.values()), inv.policy)
    nodes = [n for b in batches for n in b.nodes]
    decisions = client.preview(nodes) if client is not None else {
        n: nm.Decision("create", nm.new(run_id, n, namespace)) for n in nodes}
    return {"command": "k8s plan", "run_id": run_id, "namespace": namespace, "requestor_id": nm.REQUESTOR_ID,
            "read_cluster": client is not None,
            "batches": [{"index": b.index, "why": b.why, "switches": list(b.switches),
                         "nodes": [row(n, decisions[n]) for n in b.nodes]} for b in batches]}


def row(node: str, d: nm.Decision) -> dict:
    """One node's line of the plan: the decision, the object it names and, for create / join, its body."""
    obj = d.body or {}
    meta = obj.get("metadata", {})
    return {"node": node, "action": d.action, "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
            "requestor": obj.get("spec", {}).get("requestorID", ""), "why": d.why,
            "object": obj if d.action in ("create", "join") else None}


def lines(doc: dict) -> list[str]:
    """The plan as text, one line per batch and one per node, e.g.
    ``  node02: join nvidia/upgrade-node02 of network.operator.nvidia.com``."""
    out = [f"run {doc['run_id']}: NodeMaintenance requests as requestor {doc['requestor_id']} in namespace "
           f"{doc['namespace']} ({'the cluster read' if doc['read_cluster'] else 'offline: none assumed to exist'}); "
           "nothing written"]
    for b in doc["batches"]:
        out.append(f"batch {b['index']}: {b['why']}" + (f"; switches {', '.join(b['switches'])} held by the "
                                                           "controller" if b["switches"] else ""))
        for r in b["nodes"]:
            ref = f"{r['namespace']}/{r['name']}"
            out.append(f"  {r['node']}: " + {"create": f"create {ref}",
                                             "join": f"join {ref} of {r['requestor']}",
                                             "have": f"already held: {ref}",
                                             "refuse": f"refused: {r['why']}"}[r["action"]])
    return out
