"""Put a running lab back to its power-on state in well under a second (``fabtune lab reset``).

The daemon owns this (it has the privileges the lab's files need: root, or root of its user
namespace). When it starts, before it serves, it keeps a copy of every node tree as built
(``power-on/nodes``, ``cp -a``: modes and owners kept) and a manifest of the live trees: each path's
``lstat`` identity (inode, size, mtime and ctime in ns, mode, owner). :func:`reset` (any process)
writes a nonce to ``power-on/reset.request`` and sends the daemon ``SIGHUP``; the daemon
(:func:`restore`):

1. stops every process of the lab but itself (agents, perftest servers, node shells): its
   descendants and any process whose command line names the state folder, through a link too;
2. puts ``fabric.json`` (no injections) and ``sudoers.json`` back, empties ``run/perftest``;
3. compares each node tree with the manifest and copies back only what changed (a file written in
   place changes its ctime; a replaced one its inode), removes what is new, restores what is gone;
4. power-cycles every switch: a fresh NVUE state machine at revision 1, no pending commit, no
   confirm timer;
5. checks the result (every node tree equals the manifest again, every switch at revision 1) and
   answers in ``power-on/reset.done``: the nonce, the counts, the switches' revisions, the error.

A reboot (``fabtune lab reboot``) rebuilds a node's tree, so its next reset copies all of it back:
correct, only slower. Nothing here is needed by the engine: only the lab's users call it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

from tuning.errors import TuningError

FOLDER = "power-on"
MANIFEST = "manifest.json"
#: how long a reset may take: 30 s, plus 0.5 s per node (each node's sysroot is compared and put
#: back; 64 nodes took over 30 s on a loaded 2-core machine, bench/slurm_vs_ssh.py)
RESET_TIMEOUT_S, RESET_PER_NODE_S = 30.0, 0.5
#: files of the state folder that a reset puts back from the power-on copy (or removes if absent)
STATE_FILES = ("fabric.json", "sudoers.json")

Stat = tuple[int, int, int, int, int, int, int]  # ino, size, mtime_ns, ctime_ns, mode, uid, gid


def _identity(st: os.stat_result) -> Stat:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode, st.st_uid, st.st_gid)


def _walk(root: Path) -> dict[str, Stat]:
    """``{relative path: identity}`` of every entry below ``root`` (symlinks not followed)."""
    out: dict[str, Stat] = {}
    stack = [(str(root), "")]
    while stack:
        folder, rel = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                name = rel + entry.name
                out[name] = _identity(st)
                if stat.S_ISDIR(st.st_mode):
                    stack.append((entry.path, name + "/"))
    return out


def _manifest(live: dict[str, Stat]) -> dict[str, Stat]:
    """What a reset compares: a folder's times move with its entries, so only its mode and owner."""
    return {rel: (ident[:1] + (0, 0, 0) + ident[4:]) if stat.S_ISDIR(ident[4]) else ident
            for rel, ident in live.items()}


def keep(state_dir: Path) -> None:
    """Copy the freshly built node trees and state files to ``power-on/`` and write the manifest.

    Called by the daemon before it serves (the 4-node lab's ~57,000 sysroot entries: ~10 s at load
    5 on 2 cores and an ext4 disk; the controller waits for ``manifest.json`` before it times the
    start-up, :func:`tuning.lab.controller._wait_up`).
    """
    store = state_dir / FOLDER
    if store.exists():
        shutil.rmtree(store)
    store.mkdir()
    subprocess.run(["cp", "-a", str(state_dir / "nodes"), str(store / "nodes")], check=True)
    for name in STATE_FILES:
        if (state_dir / name).exists():
            shutil.copy2(state_dir / name, store / name)
    _save(state_dir, _manifest(_walk(state_dir / "nodes")))


def _save(state_dir: Path, manifest: dict[str, Stat]) -> None:
    (state_dir / FOLDER / MANIFEST).write_text(json.dumps(manifest, separators=(",", ":")))


_LOADED: dict[tuple[Path, int], dict[str, Stat]] = {}


def _load(state_dir: Path) -> dict[str, Stat]:
    """The manifest (kept in memory while the file is unchanged: a reset that restored nothing
    costs one walk)."""
    path = state_dir / FOLDER / MANIFEST
    try:
        key = (path, path.stat().st_mtime_ns)
    except OSError:
        raise TuningError(f"the lab in {state_dir} has no power-on copy ({FOLDER}/); "
                          "start it again with `fabtune lab up`", phase="lab") from None
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = {rel: tuple(v) for rel, v in json.loads(path.read_text()).items()}  # type: ignore[misc]
    return dict(_LOADED[key])


def _names(cmdline: bytes, state: bytes) -> bool:
    """Whether a command line names the state folder, directly or through a link to it."""
    if state in cmdline:
        return True
    return any(os.path.realpath(arg).startswith(state) for arg in cmdline.split(b"\0")
               if arg.startswith(b"/"))


def _lab_processes(state_dir: Path, daemon: int) -> list[int]:
    """The daemon's descendants (node shells, sudo'ed commands) and every process whose command
    line names ``state_dir`` (agents, stand-ins started elsewhere); not the daemon, not this one."""
    needle = str(state_dir).encode()
    parent: dict[int, int] = {}
    named: set[int] = set()
    trash: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            parent[pid] = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = Path(entry.path, "cmdline").read_bytes()
            if b"/.trash/" in cmdline:
                trash.add(pid)  # `up` deleting an old tree in the background: let it finish
            elif _names(cmdline, needle):
                named.add(pid)
        except (OSError, IndexError, ValueError):
            continue

    def below_daemon(pid: int) -> bool:
        seen = 0
        while pid in parent and seen < 64:
            pid, seen = parent[pid], seen + 1
            if pid == daemon:
                return True
        return False

    return sorted(pid for pid in parent if pid not in (daemon, os.getpid()) and pid not in trash
                  and (pid in named or below_daemon(pid)))


def _stop(pids: list[int]) -> None:
    """SIGKILL ``pids`` and wait (a condition, not a clock: until each is gone, at most 5 s)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5.0
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                break
            if state == "Z":  # dead; its parent (the daemon's loop, or init) reaps it
                break
            time.sleep(0.005)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _copy_back(src: Path, dst: Path) -> None:
    """``dst`` becomes ``src`` again: content, mode, owner, times (a folder: its mode and owner)."""
    st = src.lstat()
    if stat.S_ISDIR(st.st_mode):
        if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
            dst.unlink()
        if not dst.exists():
            dst.mkdir()
        os.chmod(dst, stat.S_IMODE(st.st_mode))
        os.chown(dst, st.st_uid, st.st_gid)
        return
    if dst.is_symlink() or dst.exists():
        _remove(dst)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dst)
        os.lchown(dst, st.st_uid, st.st_gid)
        return
    shutil.copy2(src, dst, follow_symlinks=False)
    os.chown(dst, st.st_uid, st.st_gid)


def _restore_nodes(state_dir: Path, manifest: dict[str, Stat]) -> int:
    """Copy back what differs from the manifest, remove what is new; returns how many paths moved."""
    nodes, store = state_dir / "nodes", state_dir / FOLDER / "nodes"
    live = _manifest(_walk(nodes))
    changed = sorted(rel for rel, ident in manifest.items() if live.get(rel) != ident)
    extra = sorted((rel for rel in live if rel not in manifest), reverse=True)  # children first
    for rel in extra:
        if (nodes / rel).exists() or (nodes / rel).is_symlink():
            _remove(nodes / rel)
    for rel in changed:  # sorted: a folder before what it holds
        _copy_back(store / rel, nodes / rel)
    for rel in changed:  # each restored path's new identity (folders: a child's copy moved them)
        manifest[rel] = _manifest({rel: _identity((nodes / rel).lstat())})[rel]
    return len(changed) + len(extra)


def restore(state_dir: Path, daemon: int, reset_switches, servers: frozenset[int] = frozenset()) -> dict:
    """The daemon's side of a reset (steps 1-5 of the module doc).

    Args:
        state_dir: the lab's state folder (absolute).  daemon: the daemon's pid (not stopped).
        reset_switches: callable power-cycling the switches, returning ``{name: revision}``.
        servers: pids of the daemon's own helpers that hold no node state (the tool servers,
            :mod:`tuning.lab.toolserver`): kept, while the stand-ins they run are stopped.

    Returns:
        ``{"paths_restored", "processes_stopped", "switches": {name: revision}, "error": str | None}``.
    """
    manifest = _load(state_dir)
    pids = [pid for pid in _lab_processes(state_dir, daemon) if pid not in servers]
    _stop(pids)
    store = state_dir / FOLDER
    for name in STATE_FILES:
        if (store / name).exists():
            shutil.copy2(store / name, state_dir / name)
        else:
            (state_dir / name).unlink(missing_ok=True)
    perftest = state_dir / "run" / "perftest"
    for entry in perftest.iterdir() if perftest.is_dir() else ():
        _remove(entry)
    moved = _restore_nodes(state_dir, manifest)
    drift: list[str] = []
    if moved:  # else the walk that found nothing to restore was the check
        _save(state_dir, manifest)
        after = _manifest(_walk(state_dir / "nodes"))
        drift = sorted(rel for rel in set(after) | set(manifest) if after.get(rel) != manifest.get(rel))
    switches = reset_switches()
    wrong = {name: rev for name, rev in switches.items() if rev != 1}
    error = None
    if drift or wrong:
        error = (f"the lab in {state_dir} is not at power-on after a reset: node paths {drift[:5]}, "
                 f"switches not at revision 1: {wrong}")
    return {"paths_restored": moved, "processes_stopped": len(pids), "switches": switches, "error": error}


def reset(state_dir: Path | str) -> dict:
    """Put the running lab of ``state_dir`` back to power-on (see the module doc); waits for the
    daemon's answer (a condition: its nonce in ``reset.done``; at most 30 s).

    Returns:
        ``{"paths_restored": int, "processes_stopped": int, "switches": {name: revision}}``.

    Raises:
        TuningError: no lab runs there, the daemon did not answer, or the check after the reset
            found a node path or a switch not at power-on (named).
    """
    from tuning.lab.controller import running_pid

    state_dir = Path(state_dir).resolve()
    daemon = running_pid(state_dir)
    if daemon is None:
        raise TuningError(f"no lab is running in {state_dir}; start it with `fabtune lab up`", phase="lab")
    nonce = uuid.uuid4().hex
    done = state_dir / FOLDER / "reset.done"
    (state_dir / FOLDER / "reset.request").write_text(nonce)
    os.kill(daemon, signal.SIGHUP)
    limit = RESET_TIMEOUT_S + RESET_PER_NODE_S * sum(1 for _ in (state_dir / "nodes").iterdir())
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            answer = json.loads(done.read_text())
        except (OSError, ValueError):
            answer = {}
        if answer.get("nonce") == nonce:
            if answer.get("error"):
                raise TuningError(answer["error"], phase="lab")
            return {k: answer[k] for k in ("paths_restored", "processes_stopped", "switches")}
        time.sleep(0.005)
    raise TuningError(f"the lab daemon (pid {daemon}) did not answer a reset within {limit:.0f} s",
                      phase="lab")


def answer(state_dir: Path, result: dict) -> None:
    """Write the daemon's answer to the pending request (its nonce) in ``power-on/reset.done``."""
    nonce = (state_dir / FOLDER / "reset.request").read_text().strip()
    done = state_dir / FOLDER / "reset.done"
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps({"nonce": nonce, **result}))
    os.replace(tmp, done)
