"""ConfigMaps in the lab's API server stand-in (:mod:`tuning.lab.k8s_api`): create, get, list, update,
delete in a namespace, validated as the API server validates them (name a lowercase RFC 1123
subdomain, data keys ``[-._a-zA-Z0-9]+``, unknown fields refused as with strict field validation),
refused with its ``Status`` texts (sources in :mod:`tuning.lab.k8s_api`'s docstring).
"""

from __future__ import annotations

import copy
import json
import re

from tuning.lab.k8s_api import CM, Cluster, Refused, _now, same_namespace, status

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CM_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_CM_FIELDS = {"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"}
_META_FIELDS = {"name", "namespace", "labels", "annotations", "resourceVersion", "uid", "creationTimestamp",
                "generation", "finalizers", "managedFields", "ownerReferences", "generateName", "deletionTimestamp",
                "deletionGracePeriodSeconds", "selfLink"}
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                 "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                 r"is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
           "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")


def cm_status(code: int, reason: str, message: str, name: str, causes=None) -> dict:
    """A ``Status`` about a ConfigMap (core group: ``details`` without ``group``)."""
    doc = status(code, reason, message, name, CM, causes)
    doc["details"].pop("group", None)
    return doc


def check_configmap(body: dict, name: str) -> None:
    """A ConfigMap as the API server validates it (module docstring). Raises Refused."""
    extra = sorted(set(body) - _CM_FIELDS) + [f"metadata.{k}" for k in sorted(set(body.get("metadata") or {}) - _META_FIELDS)]
    if extra:
        raise Refused(status(400, "BadRequest", f'strict decoding error: unknown field "{extra[0]}"'))
    causes = []
    if len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                       "message": f"Invalid value: {json.dumps(name)}: {SUBDOMAIN_MSG}"})
    data = body.get("data") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        # the prefix is the API server's (kubernetes-client/python#1756); the decoder's own words after it
        # (json-iterator or sigs.k8s.io/json, by version) are not reproduced
        raise Refused(status(400, "BadRequest", 'ConfigMap in version "v1" cannot be handled as a ConfigMap: '
                                                "data: every value must be a string"))
    for key in sorted(data):
        if len(key) > 253 or not _CM_KEY.fullmatch(key) or key in (".", "..") or key.startswith(".."):
            causes.append({"reason": "FieldValueInvalid", "field": f"data[{key}]",
                           "message": f"Invalid value: {json.dumps(key)}: {KEY_MSG}"})
    if causes:
        errs = [f"{c['field']}: {c['message']}" for c in causes]
        text = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
        raise Refused(cm_status(422, "Invalid", f'ConfigMap "{name}" is invalid: {text}', name, causes))


def configmap(cluster: Cluster, method: str, ns: str, name: str | None, body: dict | None) -> tuple[int, dict]:
    """One ConfigMap request in namespace ``ns``: ``(code, document)``. Raises Refused."""
    if name is None and method == "POST":
        body = copy.deepcopy(body or {})
        name = (body.get("metadata") or {}).get("name", "")
        same_namespace(body, ns)
        check_configmap(body, name)
        if (ns, name) in cluster.cms:
            raise Refused(cm_status(409, "AlreadyExists", f'{CM} "{name}" already exists', name))
        body["metadata"].update(namespace=ns, uid=f"uid-{cluster._rv()}", resourceVersion=cluster._rv(),
                                creationTimestamp=_now())
        cluster.cms[(ns, name)] = body
        return 201, copy.deepcopy(body)
    if name is None and method == "GET":  # a list (RBAC: no fabtune account may list; admin may)
        return 200, {"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": str(cluster.version)},
                     "items": [copy.deepcopy(o) for (n, _), o in sorted(cluster.cms.items()) if n == ns]}
    if name is None:
        raise Refused(status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))
    if (ns, name) not in cluster.cms:
        raise Refused(cm_status(404, "NotFound", f'{CM} "{name}" not found', name))
    old = cluster.cms[(ns, name)]
    if method == "GET":
        return 200, copy.deepcopy(old)
    if method == "DELETE":
        del cluster.cms[(ns, name)]
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "details": {"name": name, "kind": CM, "uid": old["metadata"]["uid"]}}
    if method == "PUT":
        body = copy.deepcopy(body or {})
        same_namespace(body, ns)
        check_configmap(body, name)
        if body.get("metadata", {}).get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise Refused(cm_status(409, "Conflict", f'Operation cannot be fulfilled on {CM} "{name}": the object has '
                                    "been modified; please apply your changes to the latest version and try again", name))
        body["metadata"].update({k: old["metadata"][k] for k in ("namespace", "uid", "creationTimestamp")})
        body["metadata"]["resourceVersion"] = cluster._rv()
        cluster.cms[(ns, name)] = body
        return 200, copy.deepcopy(body)
    raise Refused(status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))


