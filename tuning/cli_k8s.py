"""``fabtune k8s manifests | plan``: the Kubernetes objects that run fabtune's node work on a cluster
(:mod:`tuning.k8s.manifests`: the agent DaemonSet and its inventory ConfigMap, RBAC, the
node-problem-detector plugin), written as files to apply with ``kubectl apply -f DIR``. Registered
in :mod:`tuning.cli`; docs/kubernetes.md. ``plan`` is the dry path of a rollout on Kubernetes
(:mod:`tuning.k8s.plan`): the NodeMaintenance requests of each batch, offline or read from a cluster.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer
import yaml

from tuning.cli_args import load_inventory, out_dir_arg
from tuning.cli_emit import out
from tuning.cli_options import INV, JSON
from tuning.errors import InputError

#: a namespace name: an RFC 1123 label (63 characters at most)
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: an image reference: registry/path:tag or @digest, no spaces or shell characters
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")


def _namespace(value: str) -> str:
    if not _LABEL.fullmatch(value):
        raise InputError("--namespace", value[:64], "allowed: a DNS label (RFC 1123): 1..63 of lowercase letters, "
                         "digits and '-', starting and ending with a letter or digit")
    return value


def _image(value: str) -> str:
    if not _IMAGE.fullmatch(value):
        raise InputError("--image", value[:64], "allowed: an image reference such as registry.example.com/fabtune:0.1.0 "
                         "(letters, digits and ._/:@+-)")
    return value


def manifests(inventory: Path = INV,
              output: Path = typer.Option(..., "-o", "--output", parser=out_dir_arg, help="Output directory."),
              namespace: str = typer.Option("fabtune", "--namespace", "-n", help="Namespace of the agent, its "
                                            "ConfigMaps, RBAC subjects and fabtune's NodeMaintenance objects."),
              image: str = typer.Option("ghcr.io/fabtune/fabtune:0.1.0", "--image",
                                        help="Container image with fabtune installed (the agent's)."),
              run_id: Optional[str] = typer.Option(None, "--run-id", help="The run the agents push (a run the "
                                                   "controller began); without it they plan only (--check).")) -> None:
    """Write the Kubernetes manifests for node work on a cluster: fabtune-rbac.yaml, fabtune-agent.yaml
    (inventory ConfigMap + DaemonSet on the inventory's nodes), fabtune-npd.yaml (node-problem-detector
    plugin ConfigMap) and npd/ (the same plugin as files). Contacts nothing. Exit 0 written, 2 bad input.

    Example: fabtune k8s manifests -i inventory/example-su -o /tmp/k8s && kubectl apply -f /tmp/k8s
    """
    from tuning.k8s import manifests as mf
    from tuning.k8s.maintenance import check_node_name
    from tuning.rollout.journal_check import check_run_id

    ns, img = _namespace(namespace), _image(image)
    run = check_run_id(run_id, "--run-id") if run_id is not None else None
    inv = load_inventory(inventory, lint=False)
    nodes = [check_node_name(d.name) for d in inv.nodes]
    if not nodes:
        raise InputError(str(inventory), "gpu_nodes", "no node in the inventory: a DaemonSet for none would run nothing")
    files = mf.inventory_files(Path(inv.path))
    docs = {"fabtune-rbac.yaml": mf.rbac(ns),
            "fabtune-agent.yaml": [mf.inventory_configmap(files, ns), mf.daemonset(nodes, files, ns, img, run)],
            "fabtune-npd.yaml": [mf.npd_configmap(ns)]}
    written = _write(output, docs, {"npd/fabtune-plugin-monitor.json": json.dumps(mf.npd_config(), indent=2) + "\n",
                                    "npd/fabtune-drift.sh": mf.npd_script()})
    out.print(f"wrote {len(written)} file(s) to {output} for {len(nodes)} node(s) in namespace {ns}"
              + ("" if run else "; the agents plan only (no --run-id)"))


def plan_cmd(inventory: Path = INV, run_id: Optional[str] = typer.Option(
                 None, "--run-id", help="The run the objects are named for (default: a new run id)."),
             namespace: str = typer.Option("fabtune", "--namespace", "-n", help="Namespace of fabtune's objects."),
             server: Optional[str] = typer.Option(None, "--server", help="API server URL (https://HOST:6443) to read "
                                                  "the cluster's NodeMaintenances from (GET only); default: offline."),
             token_file: Optional[Path] = typer.Option(None, "--token-file", help="File holding a bearer token "
                                                       "for --server (never printed)."),
             ca_file: Optional[Path] = typer.Option(None, "--ca-file", help="CA bundle for an https --server."),
             as_json: bool = JSON) -> None:
    """Show what a rollout on Kubernetes would ask the NVIDIA Maintenance Operator for: the rollout's
    batches and, per node, the NodeMaintenance fabtune would create or the one of another requestor it
    would join. Writes nothing. Exit 0, 2 bad input, 4 the API server could not be read.

    Example: fabtune k8s plan -i inventory/example-su --server https://10.0.0.1:6443 --token-file /run/fabtune/token
    """
    from tuning.k8s import plan as kplan
    from tuning.rollout.journal import new_run_id
    from tuning.rollout.journal_check import check_run_id

    ns, run = _namespace(namespace), check_run_id(run_id, "--run-id") if run_id is not None else new_run_id()
    inv = load_inventory(inventory, lint=False)
    doc = kplan.plan(inv, run, ns, _client(server, token_file, ca_file, run, ns))
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        for line in kplan.lines(doc):
            out.print(line, highlight=False, soft_wrap=True)


def _client(server: Optional[str], token_file: Optional[Path], ca_file: Optional[Path], run: str, ns: str):
    """The read-only client of ``--server`` (None without one). Raises InputError for bad flags."""
    from tuning.k8s.api import connect
    from tuning.k8s.client import MaintenanceClient

    api = connect(server, token_file, ca_file)
    return MaintenanceClient(api, run, ns) if api is not None else None


def agent_cmd(node: str = typer.Option(..., "--node", help="This node's name (the DaemonSet sets $NODE_NAME)."),
              inventory: Path = INV,
              namespace: str = typer.Option("fabtune", "--namespace", "-n", help="Namespace of the plan ConfigMap."),
              server: Optional[str] = typer.Option(None, "--server", help="API server URL; default: the cluster "
                                                   "this pod runs in (its service account)."),
              token_file: Optional[Path] = typer.Option(None, "--token-file", help="Bearer token file for --server."),
              ca_file: Optional[Path] = typer.Option(None, "--ca-file", help="CA bundle for an https --server."),
              journal_dir: str = typer.Option("/var/lib/fabtune/journal", "--journal-dir",
                                              help="The run's shared journal folder as this node sees it."),
              sysroot: Optional[str] = typer.Option(None, "--sysroot", help="Where this process sees the node's "
                                                    "files (a pod mounting the host at /host: /host)."),
              poll_s: float = typer.Option(2.0, "--poll-s", min=0.1, max=60.0, help="Seconds between two reads of "
                                           "the plan ConfigMap."),
              once: bool = typer.Option(False, "--once", help="Answer the published request once, then exit.")) -> None:
    """Run as the node agent of `fabtune rollout --engine k8s` (the DaemonSet's container): read the
    plan ConfigMap fabtune-plan, run `fabtune node apply|restore` on this node for a request naming it,
    answer with a result ConfigMap (tuning/k8s/agent.py). Runs until stopped (--once: one read).
    Exit 0; 2 bad input; 4 (--once) the API server could not be read.

    Example: fabtune k8s agent --node "$NODE_NAME" -i /etc/fabtune/inventory --sysroot /host
    """
    from tuning.k8s.agent import Agent
    from tuning.k8s.api import Api, connect
    from tuning.model.grammar import check_path

    for flag, value in (("--journal-dir", journal_dir), ("--sysroot", sysroot)):
        try:
            check_path(value, parent_ok=False) if value else None
        except ValueError as e:
            raise InputError(flag, value[:60], str(e)) from None
    dev = load_inventory(inventory, lint=False)
    if node not in {d.name for d in dev.nodes}:
        raise InputError("--node", node[:60], f"names no node of {inventory}")
    api = connect(server, token_file, ca_file) or Api.in_cluster()
    agent = Agent(api, _namespace(namespace), node, str(inventory), journal_dir, sysroot)
    if once:
        name = agent.step()
        out.print(f"{node}: answered {name}" if name else f"{node}: no request for this node")
        return
    agent.serve(poll_s, lambda m: print(m, flush=True))


def _write(output: Path, docs: dict[str, list[dict]], plain: dict[str, str]) -> list[Path]:
    """Write each YAML stream and plain file under ``output`` (a script executable), atomically, read
    back. Raises InputError when the folder cannot be written."""
    from tuning.outfile import write_atomic

    texts = {name: yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
             for name, objs in docs.items()}
    texts.update(plain)
    paths = []
    try:
        for name, text in texts.items():
            path = output / name
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text.encode(), 0o755 if name.endswith(".sh") else 0o644)
            if path.read_text() != text:
                raise InputError("--output", str(path), "read back differs from what was written")
            paths.append(path)
    except OSError as e:
        raise InputError("--output", str(output), f"cannot write there: {e.strerror}") from None
    return paths


class _Dumper(yaml.SafeDumper):
    """YAML with multi-line strings (scripts, inventory files) as literal blocks, readable in a review."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def register(app: typer.Typer) -> None:
    """Add ``fabtune k8s manifests`` to the ``fabtune`` app."""
    k8s_app = typer.Typer(help="fabtune on Kubernetes: the manifests of its node agent, RBAC and "
                               "node-problem-detector plugin.", no_args_is_help=True)
    k8s_app.command("manifests")(manifests)
    k8s_app.command("plan")(plan_cmd)
    k8s_app.command("agent")(agent_cmd)
    app.add_typer(k8s_app, name="k8s")
