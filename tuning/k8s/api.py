"""A small client of the Kubernetes REST API: JSON over HTTP(S) with a bearer token, the standard
library only (the ``kubernetes`` Python client is an optional extra and is not needed for the few
calls fabtune makes; the paths are the same).

Errors: the API server answers a refused request with a ``Status`` object (``kind: Status``,
``status: Failure``, ``reason`` such as ``NotFound`` / ``AlreadyExists`` / ``Conflict`` / ``Invalid``
/ ``Forbidden``, ``code`` 404 / 409 / 409 / 422 / 403, ``message``, ``details``: k8s.io/apimachinery
``pkg/api/errors/errors.go``); :class:`ApiError` carries its code, reason and message. An answer that
is not a Status (a proxy's page) is an ApiError with reason ``''`` and the body's first line; no
answer at all is a :class:`tuning.errors.ConnectError` (the API could not be reached: never a
fabric fault). The bearer token is never put in a message or a log.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tuning.errors import ConnectError, InputError, TuningError

#: the in-cluster service account files (kubernetes.io docs, "Accessing the API from within a Pod")
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ApiError(TuningError):
    """The API server refused a request: ``code`` (HTTP), ``reason`` (the Status reason, '' when the
    answer was not a Status), ``status`` (the Status object, {} when none). Exit 4, as a device that
    could not be reached: the cluster could not be read or written as needed, never a fabric verdict."""

    exit_code = 4

    def __init__(self, method: str, path: str, code: int, reason: str, message: str, status: dict | None = None):
        super().__init__(f"{method} {path}: {code} {reason or 'error'}: {message}"[:500], phase="k8s")
        self.code, self.reason, self.status = code, reason, status or {}


class Api:
    """The API server at ``server`` (``https://10.0.0.1:6443``, ``http://127.0.0.1:16001`` in tests).

    Args:
        token: a bearer token, or None.  ca_file: the CA bundle for https (None: the system's).
        timeout_s: per request, seconds.
    """

    def __init__(self, server: str, token: str | None = None, ca_file: str | None = None, timeout_s: float = 30.0):
        self.server, self._token, self.timeout_s = server.rstrip("/"), token, timeout_s
        self._ctx = ssl.create_default_context(cafile=ca_file) if server.startswith("https:") else None

    @classmethod
    def in_cluster(cls) -> "Api":
        """The API of the cluster this pod runs in (``KUBERNETES_SERVICE_HOST`` / ``_PORT``, the
        service account's token and CA). Raises ConnectError outside a pod."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (SA_DIR / "token").is_file():
            raise ConnectError("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST or the service account token "
                               "is missing", phase="k8s")
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", (SA_DIR / "token").read_text().strip(), str(SA_DIR / "ca.crt"))

    def request(self, method: str, path: str, body: dict | None = None, query: dict | None = None) -> dict:
        """One call; the answer's JSON object. Raises ApiError (a refusal), ConnectError (no answer)."""
        url = self.server + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Accept": "application/json"})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._ctx) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise _refusal(method, path, e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            why = getattr(e, "reason", e)
            raise ConnectError(f"{method} {self.server}{path}: no answer: {why}", phase="k8s") from None
        except ValueError as e:
            raise ApiError(method, path, 200, "", f"answer is not JSON: {e}") from None

    def get(self, path: str, query: dict | None = None) -> dict:
        """GET ``path``. Raises as :meth:`request`."""
        return self.request("GET", path, query=query)

    def create(self, path: str, body: dict) -> dict:
        """POST ``body`` to the collection ``path``; the object as stored."""
        return self.request("POST", path, body)

    def replace(self, path: str, body: dict) -> dict:
        """PUT ``body`` (with its ``metadata.resourceVersion``: a stale one is a 409 Conflict)."""
        return self.request("PUT", path, body)

    def delete(self, path: str) -> dict:
        """DELETE ``path``; the object (with its ``deletionTimestamp`` while finalizers hold it) or a Status."""
        return self.request("DELETE", path)


def _refusal(method: str, path: str, code: int, raw: bytes) -> ApiError:
    """The ApiError of a refused request: the Status's reason and message, else the body's first line."""
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        return ApiError(method, path, int(doc.get("code") or code), str(doc.get("reason") or ""),
                        " ".join(str(doc.get("message") or "").split()), doc)
    first = (raw.decode(errors="replace").strip().splitlines() or ["no body"])[0]
    return ApiError(method, path, code, "", first[:200])


#: the environment a controller outside the cluster names its API server with (``fabtune rollout --engine k8s``)
SERVER_ENV, TOKEN_FILE_ENV, CA_FILE_ENV, NAMESPACE_ENV = ("FABTUNE_K8S_SERVER", "FABTUNE_K8S_TOKEN_FILE",
                                                          "FABTUNE_K8S_CA_FILE", "FABTUNE_K8S_NAMESPACE")
_SERVER = re.compile(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?")


def connect(server: str | None, token_file: Path | None, ca_file: Path | None,
            flags: tuple[str, str, str] = ("--server", "--token-file", "--ca-file")) -> Api | None:
    """The Api of ``server`` with the token read from ``token_file`` (never printed); None without a
    server. ``flags`` name the three values in errors (command-line flags or environment variables).

    Raises:
        InputError: a server not ``http(s)://HOST[:PORT][/PATH]``, a token or CA file without a server,
            a token file that cannot be read, a CA file that is not a file.
    """
    if server is None:
        if token_file or ca_file:
            flag, given = (flags[1], token_file) if token_file else (flags[2], ca_file)
            raise InputError(flag, str(given)[:80], f"given without {flags[0]}: it is for that API server")
        return None
    if not _SERVER.fullmatch(server):
        raise InputError(flags[0], server[:80], "allowed: http(s)://HOST[:PORT][/PATH], e.g. https://10.0.0.1:6443")
    try:
        token = Path(token_file).read_text().strip() if token_file else None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(flags[1], str(token_file), f"cannot read it: {getattr(e, 'strerror', e)}") from None
    if ca_file and not Path(ca_file).is_file():
        raise InputError(flags[2], str(ca_file), "not a file")
    return Api(server, token, str(ca_file) if ca_file else None)


def from_env() -> Api:
    """The Api named by :data:`SERVER_ENV` (with :data:`TOKEN_FILE_ENV`, :data:`CA_FILE_ENV`), else the
    cluster this process runs in (:meth:`Api.in_cluster`). Raises InputError, ConnectError."""
    env = [os.environ.get(k) or None for k in (SERVER_ENV, TOKEN_FILE_ENV, CA_FILE_ENV)]
    api = connect(env[0], Path(env[1]) if env[1] else None, Path(env[2]) if env[2] else None,
                  (f"${SERVER_ENV}", f"${TOKEN_FILE_ENV}", f"${CA_FILE_ENV}"))
    return api if api is not None else Api.in_cluster()
