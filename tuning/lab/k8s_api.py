"""A stand-in for the Kubernetes API server plus the NVIDIA Maintenance Operator, for the objects
fabtune uses only: nodes (read), NodeMaintenances (list, create, get, update, status update,
delete) and ConfigMaps in a namespace (create, get, update, delete: the rollout's plan and the
agents' results, :mod:`tuning.k8s.agent`). Started by ``fabtune lab up --k8s`` (:mod:`tuning.lab.k8s`)
and by the tests. Never more lenient than the real pair:

- every NodeMaintenance written is validated against the CRD's ``openAPIV3Schema`` as published
  (``schemas/maintenance.nvidia.com_nodemaintenances.yaml`` beside this module, with its source in
  ``schemas/README.md``; jsonschema), after the schema's
  defaults are applied as the API server applies them; a field the schema does not list is refused
  (the API server prunes it, or refuses it with ``fieldValidation=Strict``: the stricter choice);
  ``spec.nodeName`` and ``spec.requestorID`` are immutable (the CRD's ``self == oldSelf`` rules);
- refusals are ``Status`` objects as k8s.io/apimachinery ``pkg/api/errors`` builds them: NotFound
  404, AlreadyExists 409, Conflict 409 (a stale ``resourceVersion``), Invalid 422 (with causes),
  BadRequest 400 (strict decoding), Unauthorized 401 (a wrong bearer token), Forbidden 403 (RBAC:
  :mod:`tuning.lab.k8s_rbac`, the roles ``fabtune k8s manifests`` writes), and the operator's validating webhook ``vnodemaintenance.kb.io``
  (a node that does not exist: 403 Forbidden, "admission webhook ... denied the request");
- the operator (``internal/controller``): one object per node scheduled (the oldest), then Cordon
  (the node's ``spec.unschedulable``), then the ``Ready`` condition with reason ``Ready``, one step
  per request the server answers (so a client must wait); a ``RequestorFailed`` condition True turns
  the Ready reason into ``RequestorFailed``; a deleted object keeps its finalizer until its
  ``additionalRequestors`` are empty, then uncordons the node and goes;
- a ConfigMap's name must be a DNS-1123 subdomain and its data keys ``[-._a-zA-Z0-9]+`` (422
  Invalid, the texts of k8s.io/apimachinery ``validation.IsDNS1123Subdomain`` and ``IsConfigMapKey``
  as kubectl prints them: GiganticMinecraft/seichi_infra#564, FIWARE/helm-charts#389;
  :mod:`tuning.lab.k8s_cm`); its NotFound and
  AlreadyExists name ``configmaps`` (kubernetes/test-infra#8940, fabric8io/kubernetes-client#1578).
  Not modelled: the 1 MiB size limit (no source of its text was found; fabtune's plan is a few kB).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import yaml

from tuning.lab import k8s_rbac

CRD = Path(__file__).parent / "schemas" / "maintenance.nvidia.com_nodemaintenances.yaml"
CM = "configmaps"
GROUP, PLURAL, KIND = "maintenance.nvidia.com", "nodemaintenances", "NodeMaintenance"
FINALIZER = "maintenance.nvidia.com/finalizer"
_ITEM = re.compile(r"^/apis/maintenance\.nvidia\.com/v1alpha1/namespaces/([^/]+)/nodemaintenances(?:/([^/]+))?(?:/(status))?$")


def crd_schema() -> dict:
    """The v1alpha1 ``openAPIV3Schema`` of the published CRD."""
    crd = yaml.safe_load(CRD.read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")["schema"]["openAPIV3Schema"]


def defaulted(obj: dict, schema: dict) -> dict:
    """``obj`` with the schema's ``default`` values filled in where the parent object is present."""
    out = copy.deepcopy(obj)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if isinstance(out.get(key), dict) and sub.get("type") == "object":
            out[key] = defaulted(out[key], sub)
    return out


def unknown_fields(obj, schema: dict, at: str = "") -> list[str]:
    """Dotted paths of the fields of ``obj`` the schema does not list (``metadata`` is the API's own)."""
    if isinstance(obj, list) and "items" in schema:
        return [p for i, x in enumerate(obj) for p in unknown_fields(x, schema["items"], f"{at}[{i}]")]
    if not isinstance(obj, dict) or "properties" not in schema:
        return []
    out = []
    for k, v in obj.items():
        if k not in schema["properties"]:
            out.append(f"{at}{k}")
        elif k != "metadata":
            out += unknown_fields(v, schema["properties"][k], f"{at}{k}.")
    return out


def schema_causes(obj: dict, schema: dict) -> list[dict]:
    """The CRD schema's violations as the API server's ``StatusCause`` list (field, type, message)."""
    causes = []
    for e in sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path)):
        where = ".".join(str(p) for p in e.path)
        if e.validator == "required":
            missing = re.search(r"'([^']+)' is a required property", e.message).group(1)
            field = f"{where}.{missing}" if where else missing
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": field})
            continue
        kind = "FieldValueNotSupported" if e.validator == "enum" else "FieldValueInvalid"
        rule = {"pattern": f"should match '{e.validator_value}'", "maxLength": f"should be at most {e.validator_value} chars long",
                "minLength": f"should be at least {e.validator_value} chars long",
                "minimum": f"should be greater than or equal to {e.validator_value}"}.get(e.validator, e.message)
        causes.append({"reason": kind, "message": f"Invalid value: {json.dumps(e.instance)}: {where} in body {rule}",
                       "field": where})
    return causes


def same_namespace(body: dict, ns: str) -> None:
    """Refuse an object whose ``metadata.namespace`` is set and not the URL's ``ns``: 400 BadRequest
    (as the API server answers, quoted in grycap/oscar-worker#4)."""
    given = (body.get("metadata") or {}).get("namespace")
    if given and given != ns:
        raise Refused(status(400, "BadRequest", "the namespace of the provided object does not match the namespace "
                                                "sent on the request"))


def status(code: int, reason: str, message: str, name: str = "", kind: str = PLURAL, causes=None) -> dict:
    """A ``Status`` failure object (apimachinery ``pkg/api/errors``)."""
    doc = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
           "reason": reason, "code": code}
    if name:
        doc["details"] = {"name": name, "group": GROUP if kind != "nodes" else "", "kind": kind}
        if causes:
            doc["details"]["causes"] = causes
    return doc


class Refused(Exception):
    """A request the stand-in refuses: ``doc`` is its Status."""

    def __init__(self, doc: dict):
        super().__init__(doc["message"])
        self.doc = doc


class Cluster:
    """The stored objects (``nodes``: name -> Node; ``nms``: (namespace, name) -> NodeMaintenance) and the
    operator's steps. Every request takes :attr:`lock`."""

    def __init__(self, nodes: list[str], token: str | None = None, users: dict[str, str] | None = None,
                 rbac: list[dict] | None = None):
        self.lock = threading.Lock()
        # token -> user; given, every request must carry "Authorization: Bearer TOKEN" of one, else 401;
        # ``token`` is an administrator's (system:masters: every verb), a service account's is held to ``rbac``
        self.users = {**({token: "system:admin"} if token else {}), **(users or {})}
        self.rbac = rbac or []
        self.cms: dict[tuple[str, str], dict] = {}
        self.schema = crd_schema()
        self.nodes = {n: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}, "spec": {}} for n in nodes}
        self.nms: dict[tuple[str, str], dict] = {}
        self.version = 100
        self.requests: list[tuple[str, str]] = []

    def _rv(self) -> str:
        self.version += 1
        return str(self.version)

    def check(self, obj: dict, name: str, old: dict | None = None) -> dict:
        """``obj`` defaulted and validated (module docstring). Raises Refused."""
        extra = unknown_fields(obj, self.schema)
        if extra:
            raise Refused(status(400, "BadRequest", f'strict decoding error: unknown field "{extra[0]}"'))
        obj = defaulted(obj, self.schema)
        causes = schema_causes(obj, self.schema)
        for key in ("nodeName", "requestorID") if old else ():
            if obj["spec"].get(key) != old["spec"].get(key):
                causes.append({"reason": "FieldValueInvalid", "field": f"spec.{key}",
                               "message": f"Invalid value: \"string\": Value is immutable"})
        if causes:
            errs = [f"{c['field']}: {c['message']}" for c in causes]
            text = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
            raise Refused(status(422, "Invalid", f'{KIND}.{GROUP} "{name}" is invalid: {text}', name, KIND, causes))
        return obj

    def create(self, ns: str, body: dict) -> dict:
        same_namespace(body, ns)
        name = body.get("metadata", {}).get("name", "")
        obj = self.check(body, name)
        if (ns, name) in self.nms:
            raise Refused(status(409, "AlreadyExists", f'{PLURAL}.{GROUP} "{name}" already exists', name))
        node = obj["spec"]["nodeName"]
        if node not in self.nodes:
            raise Refused(status(403, "Forbidden", 'admission webhook "vnodemaintenance.kb.io" denied the request: '
                                 f"invalid spec.nodeName, failed to get node {node} for NodeMaintenance. "
                                 f'nodes "{node}" not found'))
        meta = obj["metadata"]
        meta.update(namespace=ns, uid=f"uid-{self._rv()}", resourceVersion=self._rv(), generation=1,
                    creationTimestamp=_now(), finalizers=[])
        obj.pop("status", None)  # the status subresource: a create's status is dropped
        self.nms[(ns, name)] = obj
        return obj

    def get(self, ns: str, name: str) -> dict:
        if (ns, name) not in self.nms:
            raise Refused(status(404, "NotFound", f'{PLURAL}.{GROUP} "{name}" not found', name))
        return self.nms[(ns, name)]

    def replace(self, ns: str, name: str, body: dict, sub: str) -> dict:
        same_namespace(body, ns)
        old = self.get(ns, name)
        if body.get("metadata", {}).get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise Refused(status(409, "Conflict", f'Operation cannot be fulfilled on {PLURAL}.{GROUP} "{name}": the '
                                 "object has been modified; please apply your changes to the latest version and try "
                                 "again", name))
        new = self.check(body, name, old)
        keep = copy.deepcopy(old)
        if sub == "status":  # the status subresource changes the status only
            keep["status"] = new.get("status", {})
        else:
            for k in ("spec",):
                if new[k] != old[k]:
                    keep["metadata"]["generation"] += 1
                keep[k] = new[k]
            keep["metadata"]["annotations"] = new["metadata"].get("annotations") or {}
            keep["metadata"]["labels"] = new["metadata"].get("labels") or {}
        keep["metadata"]["resourceVersion"] = self._rv()
        self.nms[(ns, name)] = keep
        return keep

    def delete(self, ns: str, name: str) -> dict:
        obj = self.get(ns, name)
        if not obj["metadata"]["finalizers"]:
            del self.nms[(ns, name)]
            return obj
        obj["metadata"].setdefault("deletionTimestamp", _now())
        obj["metadata"]["resourceVersion"] = self._rv()
        return obj

    def reconcile(self) -> None:
        """One step of the operator for every object (module docstring)."""
        for key, obj in sorted(self.nms.items(), key=lambda kv: kv[1]["metadata"]["creationTimestamp"] + kv[0][1]):
            node = self.nodes[obj["spec"]["nodeName"]]
            reason = _ready(obj)
            if obj["metadata"].get("deletionTimestamp"):
                if not obj["spec"].get("additionalRequestors"):
                    if not any(o is not obj and o["spec"]["nodeName"] == obj["spec"]["nodeName"] and _ready(o)
                               for o in self.nms.values()):
                        node["spec"]["unschedulable"] = False
                    del self.nms[key]
                continue
            busy = any(o is not obj and o["spec"]["nodeName"] == obj["spec"]["nodeName"] and _ready(o) not in ("", "Pending")
                       for o in self.nms.values())
            step = {"": "Pending", "Pending": None if busy else "Scheduled", "Scheduled": "Cordon", "Cordon": "Ready"}
            nxt = step.get(reason)
            if nxt == "Scheduled":
                obj["metadata"]["finalizers"] = [FINALIZER]
            if nxt == "Ready" and obj["spec"].get("cordon", True):
                node["spec"]["unschedulable"] = True
            failed = any(c["type"] == "RequestorFailed" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))
            if reason == "Ready" and failed:
                nxt = "RequestorFailed"
            elif reason == "RequestorFailed" and not failed:
                nxt = "Ready"
            if nxt:
                _set_ready(obj, nxt)
                obj["metadata"]["resourceVersion"] = self._rv()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(obj: dict) -> str:
    return next((c["reason"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"), "")


def _set_ready(obj: dict, reason: str) -> None:
    conds = [c for c in obj.setdefault("status", {}).get("conditions", []) if c["type"] != "Ready"]
    conds.insert(0, {"type": "Ready", "status": "True" if reason in ("Ready", "RequestorFailed") else "False",
                     "reason": reason, "message": "", "lastTransitionTime": _now()})
    obj["status"]["conditions"] = conds


_CM_ITEM = re.compile(r"^/api/v1/namespaces/([^/]+)/configmaps(?:/([^/]+))?$")
def authorize(cluster: Cluster, header: str | None, method: str, p: str) -> None:
    """401 without a known bearer token; 403 when a service account's roles do not allow the request
    (:mod:`tuning.lab.k8s_rbac`; ``system:admin`` may do anything). Nothing when no token is set."""
    if not cluster.users:
        return
    user = cluster.users.get((header or "").removeprefix("Bearer ")) if (header or "").startswith("Bearer ") else None
    if user is None:
        raise Refused({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    if not user.startswith(k8s_rbac.SA_PREFIX):
        return
    m, c = _ITEM.match(p), _CM_ITEM.match(p)
    if c:
        group, resource, ns, name = "", CM, c.group(1), c.group(2) or ""
    elif m:
        group, resource, ns, name = GROUP, PLURAL + (f"/{m.group(3)}" if m.group(3) else ""), m.group(1), m.group(2) or ""
    elif p == f"/apis/{GROUP}/v1alpha1/{PLURAL}":
        group, resource, ns, name = GROUP, PLURAL, None, ""
    else:
        group, resource, ns, name = "", "nodes", None, p.rsplit("/", 1)[-1]
    verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "DELETE": "delete"}.get(method, "")
    if not k8s_rbac.allowed(cluster.rbac, user, verb, group, resource, ns):
        raise Refused(k8s_rbac.forbidden(user, verb, group, resource, ns, name))


def serve(cluster: Cluster, port: int = 0) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:``port`` (0: a free one) answering for ``cluster``, in a daemon thread;
    ``shutdown()`` ends it."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a) -> None:
            pass

        def _answer(self, code: int, doc: dict) -> None:
            raw = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _route(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            p = self.path.split("?")[0]
            with cluster.lock:
                cluster.requests.append((self.command, p))
                try:
                    authorize(cluster, self.headers.get("Authorization"), self.command, p)
                    try:
                        body = json.loads(self.rfile.read(length)) if length else None
                    except ValueError as e:  # the API server's words (microsoft/pai#4840); the parser's are Python's
                        kind = "ConfigMap" if _CM_ITEM.match(p) else KIND
                        raise Refused(status(400, "BadRequest", f"the object provided is unrecognized (must be of type "
                                             f"{kind}): couldn't get version/kind; json parse error: {e}")) from None
                    code, doc = dispatch(cluster, self.command, p, body)
                except Refused as e:
                    code, doc = e.doc["code"], e.doc
                cluster.reconcile()
            self._answer(code, doc)

        do_GET = do_POST = do_PUT = do_DELETE = _route

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def dispatch(cluster: Cluster, method: str, p: str, body: dict | None) -> tuple[int, dict]:
    """One request: ``(code, document)``. Raises Refused."""
    c = _CM_ITEM.match(p)
    if c:
        from tuning.lab.k8s_cm import configmap

        return configmap(cluster, method, c.group(1), c.group(2), body)
    if p == f"/apis/{GROUP}/v1alpha1/{PLURAL}" and method == "GET":
        return 200, {"apiVersion": f"{GROUP}/v1alpha1", "kind": "NodeMaintenanceList", "metadata": {},
                     "items": [copy.deepcopy(o) for o in cluster.nms.values()]}
    m = re.fullmatch(r"/api/v1/nodes/([^/]+)", p)
    if m and method == "GET":
        if m.group(1) not in cluster.nodes:
            raise Refused(status(404, "NotFound", f'nodes "{m.group(1)}" not found', m.group(1), "nodes"))
        return 200, copy.deepcopy(cluster.nodes[m.group(1)])
    m = _ITEM.match(p)
    if not m:
        raise Refused(status(404, "NotFound", "the server could not find the requested resource"))
    ns, name, sub = m.groups()
    if name is None and method == "POST":
        return 201, copy.deepcopy(cluster.create(ns, body or {}))
    if name and method == "GET":
        return 200, copy.deepcopy(cluster.get(ns, name))
    if name and method == "PUT":
        return 200, copy.deepcopy(cluster.replace(ns, name, body or {}, sub or ""))
    if name and method == "DELETE" and not sub:
        return 200, copy.deepcopy(cluster.delete(ns, name))
    raise Refused(status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))
