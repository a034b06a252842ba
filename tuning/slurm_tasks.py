"""What one ``srun`` step of ``fabtune node ...`` tasks left (the Slurm front end,
:mod:`tuning.slurm_engine`): each task's JSON result in ``<out_dir>/<tag>-<task>.out``, srun's
failed-task lines and each failed task's own ``fabtune: error:`` line in its ``.err``, read into
each node's result or its error, by the exit code the node command documents (``fabtune node
apply``: 1 failed, 2 bad input, 3 restore failed, 4 no answer). Source: ``srun(1)`` of Slurm 22.05
and its output as printed in the Slurm lab.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tuning.errors import ConnectError, RollbackError, SetupError, TuningError

#: the command line that starts fabtune in a task (default ``fabtune`` from the task's PATH)
NODE_COMMAND_ENV = "FABTUNE_NODE_COMMAND"
#: srun's report of a failed task (Slurm 22.05 ``src/srun/srun_job.c``; as printed in the Slurm lab)
TASK_FAILED = re.compile(r"^srun: error: (\S+): tasks? ([0-9,-]+): (.*)$", re.M)
EXIT_CODE = re.compile(r"Exited with exit code (\d+)")


def task_results(out_dir: Path, tag: str, nodes: list[str], srun_err: str,
                 rc: int) -> tuple[dict[str, dict], dict[str, BaseException]]:
    """Read one step's tasks: ``<out_dir>/<tag>-<task>.out`` (a JSON result naming its node) and
    srun's failed-task lines (:data:`TASK_FAILED`) with each task's ``.err``. Returns ``(results,
    errors)``; a node with neither a result nor a failed-task line is unreachable with srun's words,
    a setup error naming :data:`NODE_COMMAND_ENV` when srun exited 0 (its task ran and printed none)."""
    results, errors = {}, {}
    for t in range(len(nodes)):
        try:
            doc = json.loads((out_dir / f"{tag}-{t}.out").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("node") in nodes:
            results[doc["node"]] = doc
    for node, tasks, what in TASK_FAILED.findall(srun_err):
        if node not in nodes:
            continue
        results.pop(node, None)
        errors[node] = task_error(node, what, _last_error(out_dir / f"{tag}-{tasks.split('-')[0]}.err"))
    for node in nodes:
        if node in results or node in errors:
            continue
        why = " ".join(srun_err.split())[-300:] or "nothing said"
        if rc != 0:
            errors[node] = ConnectError(f"srun (exit {rc}) gave no result for {node}: {why}", host=node, phase="slurm")
        else:  # every task ran and exited 0: not fabtune's result, or not where the controller reads it
            errors[node] = SetupError(f"srun task on {node} exited 0 without a JSON result: set {NODE_COMMAND_ENV} "
                                      "to fabtune's path on the nodes; the journal folder must be at the same path "
                                      "on the nodes (a shared file system)", host=node, phase="slurm")
    return results, errors


def task_error(node: str, what: str, text: str) -> TuningError:
    """The error of a task Slurm reports failed (``what``: ``Exited with exit code 4``, ``Killed``),
    with the node's own last error line ``text``: exit 4, killed or no exit code -> ConnectError,
    3 -> RollbackError, else TuningError (a failed push, restored on the node)."""
    code = EXIT_CODE.search(what)
    msg = f"srun task on {node}: {what}: {text or 'no error text'}"
    if code is None or code.group(1) == str(ConnectError.exit_code):
        return ConnectError(msg, host=node, phase="slurm")
    if code.group(1) == str(SetupError.exit_code):  # the node refused its input before any write
        hint = (f"; set {NODE_COMMAND_ENV} to fabtune's path on the nodes" if "execve" in text else
                "; the inventory and journal folder must be at the same paths on the nodes (a shared file system)")
        return SetupError(msg + hint, host=node, phase="slurm")
    if code.group(1) == str(RollbackError.exit_code):
        return RollbackError(msg, host=node, phase="restore")
    return TuningError(msg, host=node, phase="apply")


def _last_error(path: Path) -> str:
    """A task's ``fabtune: error: ...`` line (else its last line), '' when it wrote none."""
    try:
        lines = [x.strip() for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    errs = [x for x in lines if x.startswith("fabtune: error:")]
    return (errs or lines or [""])[-1][:300]


#: the folder a collect step's task files go in (no run yet: the first collect comes before the
#: journal), ``.fabtune-collect-HOST-PID-XXXXXXXX`` in the journal folder, removed after the step
COLLECT_PREFIX = ".fabtune-collect-"


def collect_dir(journal_dir: Path) -> Path:
    """A new folder for one collect step's task files in ``journal_dir``, named by this host and
    process; the folders a controller of this host left when it was killed (its process gone) are
    removed first (:func:`sweep`)."""
    import os
    import socket
    import tempfile

    host = socket.gethostname()
    sweep(journal_dir, host)
    return Path(tempfile.mkdtemp(prefix=f"{COLLECT_PREFIX}{host}-{os.getpid()}-", dir=journal_dir))


def sweep(journal_dir: Path, host: str) -> list[Path]:
    """Remove ``journal_dir``'s collect folders of ``host`` whose process is gone (a controller
    killed during a collect step); a live process's, another host's, a link or a name not of
    :func:`collect_dir`'s form is left. Returns the folders removed."""
    import os
    import shutil

    gone = []
    for p in Path(journal_dir).glob(f"{COLLECT_PREFIX}{host}-*-*"):
        pid = p.name[len(COLLECT_PREFIX) + len(host) + 1:].split("-", 1)[0]
        if not pid.isdigit() or p.is_symlink() or not p.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (a run of this host collecting now)
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue  # another user's live process, or no pid at all
        shutil.rmtree(p, ignore_errors=True)
        gone.append(p)
    return gone
