"""RBAC as the Kubernetes API server's authorizer applies it, for the lab's stand-in
(:mod:`tuning.lab.k8s_api`): a service account may do a verb on a resource only when a rule of a
Role bound to it in that namespace, or of a ClusterRole bound to it cluster-wide, names the verb,
the API group and the resource (``*`` in a list matches all; ``resourceNames`` are not used by
fabtune's roles and refuse here). Source: kubernetes.io "Using RBAC Authorization".

A refusal is the API server's ``Status`` (403 ``Forbidden``), worded as in its logs (a named object:
``configmaps "NAME" is forbidden: User "system:serviceaccount:NS:SA" cannot get resource
"configmaps" in API group "" in the namespace "NS"``; a collection: ``configmaps is forbidden: User
... cannot create resource ...``; cluster-wide: ``... at the cluster scope``), as quoted in
kubernetes-client and operator issues (spring-cloud-kubernetes#141, kvaps/kube-fencing#8,
kubernetes-sigs/cluster-api#1600).
"""

from __future__ import annotations

SA_PREFIX = "system:serviceaccount:"


def _subjects_match(binding: dict, user: str) -> bool:
    return any(s.get("kind") == "ServiceAccount" and f"{SA_PREFIX}{s.get('namespace')}:{s.get('name')}" == user
               for s in binding.get("subjects") or [])


def _rule_allows(rule: dict, verb: str, group: str, resource: str) -> bool:
    if rule.get("resourceNames"):
        return False
    return (any(g in ("*", group) for g in rule.get("apiGroups") or [])
            and any(r in ("*", resource) for r in rule.get("resources") or [])
            and any(v in ("*", verb) for v in rule.get("verbs") or []))


def allowed(objects: list[dict], user: str, verb: str, group: str, resource: str, namespace: str | None) -> bool:
    """Whether ``user`` (``system:serviceaccount:NS:NAME``) may ``verb`` ``resource`` (``configmaps``,
    ``nodemaintenances/status``) of API ``group`` in ``namespace`` (None: cluster-wide) under the
    Roles, ClusterRoles and bindings of ``objects`` (as ``fabtune k8s manifests`` writes them)."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o.get("kind") in ("Role", "ClusterRole")}
    for b in objects:
        if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding") or not _subjects_match(b, user):
            continue
        if b["kind"] == "RoleBinding" and b["metadata"].get("namespace") != namespace:
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], b["metadata"].get("namespace") if ref["kind"] == "Role" else None, ref["name"]))
        if role and any(_rule_allows(r, verb, group, resource) for r in role.get("rules") or []):
            return True
    return False


def forbidden(user: str, verb: str, group: str, resource: str, namespace: str | None, name: str = "") -> dict:
    """The 403 ``Status`` of a refused request (module docstring)."""
    plural, sub = (resource.split("/", 1) + [""])[:2]
    what = f"{plural}.{group}" if group else plural
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (f'{what}{f" {chr(34)}{name}{chr(34)}" if name else ""} is forbidden: User "{user}" cannot {verb} '
               f'resource "{resource}" in API group "{group}" {where}')
    details = {"group": group, "kind": plural, **({"name": name} if name else {})}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "Forbidden", "details": details, "code": 403}
