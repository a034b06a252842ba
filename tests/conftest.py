"""Shared pytest fixtures."""

from __future__ import annotations

import functools
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

# pytest keeps each test module's assertion-rewritten code in __pycache__ only where bytecode may be
# written; under PYTHONDONTWRITEBYTECODE (CI's image, the development machine) every run rewrote all
# ~300 test modules in each xdist worker: about 10 s of CPU a worker, a fast-tier run's 8 %
sys.dont_write_bytecode = False


def shared_cases() -> Path:
    """Folder of the reference tool outputs: ``shared/cases`` next to the repository,
    else ``$FABTUNE_CASES_DIR``."""
    beside = Path(__file__).resolve().parents[1].parent / "shared" / "cases"
    env = os.environ.get("FABTUNE_CASES_DIR")
    return Path(env) if env and not beside.is_dir() else beside


@pytest.fixture(scope="session")
def cases_dir() -> Path:
    """:func:`shared_cases` as a fixture."""
    return shared_cases()


REPO = Path(__file__).resolve().parents[1]


#: the claim on this process's port range (:func:`_port_range`), held while the process lives
_PORT_CLAIM = None
#: how many 800-port ranges lie between 23000 and the kernel's ephemeral range (32768)
PORT_RANGES = 12


def port_ranges_to_try(worker: str, run_uid: str) -> list[int]:
    """The first ports of the 12 ranges, in the order ``worker`` (``gw3``) of the run ``run_uid``
    tries them: from the one its seed and index pick, then upwards (wrapping), so the workers of
    one run start on 12 different ranges."""
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    seed = sum(run_uid.encode())
    return [23000 + ((seed + index + k) % PORT_RANGES) * 800 for k in range(PORT_RANGES)]


def claim_port_range(base: int):
    """The abstract unix socket that claims the range from ``base`` for this process, or None when
    another process holds it (the kernel frees a claim when its process exits)."""
    import socket

    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0fabtune-test-ports-{base}")
    except OSError:
        claim.close()
        return None
    return claim


def _port_range() -> int:
    """This pytest process's first test port: 800 ports per process (xdist worker), one of 12
    ranges from 23000 up, so every one lies below the kernel's ephemeral range (32768-60999) and
    away from inventory/lab's 22101-22203. The first range of :func:`port_ranges_to_try` that no
    other process holds (a concurrent run, another worker) is claimed (:func:`claim_port_range`)
    for the process's life.

    Raises:
        RuntimeError: all 12 ranges are held by other pytest processes.
    """
    global _PORT_CLAIM
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    run_uid = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
    for base in port_ranges_to_try(worker, run_uid):
        claim = claim_port_range(base)
        if claim is not None:
            _PORT_CLAIM = claim
            return base
    raise RuntimeError(f"all {PORT_RANGES} test port ranges (23000-32599) are held by other pytest processes")


#: the test labs' port range (800 ports): the pool's labs from +300, tests' own fixed ports below
TEST_BASE_PORT = _port_range()
#: where the pool's labs start in that range
POOL_OFFSET = 300
_POOL = None


def lab_pool():
    """This process's :class:`tests.labpool.LabPool` (made at first use; stopped at session end)."""
    global _POOL
    if _POOL is None:
        import tempfile

        from tests.labpool import LabPool

        _POOL = LabPool(Path(tempfile.mkdtemp(prefix="fabtune-labs-")), TEST_BASE_PORT + POOL_OFFSET)
    return _POOL


def copy_lab_inventory_files(dest: Path) -> Path:
    """A copy of ``inventory/lab`` in ``dest`` without its ``.state`` or lock; returns ``dest``."""
    import shutil

    shutil.copytree(REPO / "inventory" / "lab", dest, ignore=shutil.ignore_patterns(".state", ".fabtune*"))
    return dest


@contextmanager
def running_lab(parent: Path) -> Iterator[Path]:
    """A power-on (untuned) lab behind a fresh copy of ``inventory/lab`` in ``parent/lab``; yields
    the inventory dir. The lab comes from this process's pool (started once, reset per lease)."""
    with lab_pool().lease(copy_lab_inventory_files(parent / "lab")) as inv:
        yield inv


@contextmanager
def served_stand_ins(state: Path) -> Iterator[None]:
    """The lab's two tool servers (:mod:`tuning.lab.toolserver`) for the stand-ins' wrappers written
    under ``state/bin`` (no daemon): each call forked from a preloaded interpreter, as in a running
    lab, instead of starting one (~35 ms of CPU a call); stopped on exit."""
    from tuning.lab import toolserver

    servers = toolserver.start(state)
    try:
        yield
    finally:
        toolserver.stop(servers)


@contextmanager
def lab_up(inv: Path) -> Iterator[Path]:
    """A power-on lab of the pool with the fabric ``inv`` names (its node count, its switches' OSes),
    serving ``inv`` (its ``hosts.yaml`` ports are rewritten to the lab's); yields ``inv``."""
    from tuning.lab.fabric import fabric_for_inventory

    fabric = fabric_for_inventory(inv)
    oses = {s.name: s.os for s in fabric.switches if s.os != "nvue"}
    with lab_pool().lease(inv, len(fabric.nodes), oses) as leased:
        yield leased


def pytest_sessionfinish(session, exitstatus):
    """Stop the pool's labs (each xdist worker stops its own); the controlling process removes
    the folder of its lab-module list."""
    import shutil

    global _POOL
    if _POOL is not None:
        _POOL.close()
        shutil.rmtree(_POOL.root, ignore_errors=True)
        _POOL = None
    folder = getattr(session.config, "_fabtune_xdist_folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    session.config._fabtune_passed = exitstatus == 0


def pytest_unconfigure(config):
    """The controlling process removes the run's temporary folder it made (:mod:`tests.tmpfs`),
    or names it when the run failed."""
    folder = getattr(config, "_fabtune_tmp", None)
    if folder is not None:
        from tests import tmpfs

        said = tmpfs.done(folder, getattr(config, "_fabtune_passed", False))
        if said:
            import sys

            print(said, file=sys.stderr)


@pytest.fixture()
def lab_inventory(tmp_path: Path):
    """A power-on lab for a copy of ``inventory/lab`` in tmp_path; yields the inventory dir.

    The lab listens in this process's port range (``TEST_BASE_PORT``), so tests never collide
    with a lab an operator runs on inventory/lab's ports.
    """
    with running_lab(tmp_path) as inv:
        yield inv


@pytest.fixture()
def lab(lab_inventory: Path) -> Path:
    """The state dir of a running power-on lab (see ``lab_inventory``)."""
    return lab_inventory / ".state"


#: NIC traffic counters in a lab sysroot (RDMA ``hw_counters``, the ``ethtool -S`` state): an incast
#: moves them, and they are no configuration a restore puts back
COUNTER_FILES = re.compile(r"sys/class/infiniband/[^/]+/ports/\d+/hw_counters/|run/lab/ethtool/")


def tree_files(root: Path | str, links: bool = False) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative path -> bytes) in path order; with ``links`` every
    symlink too (-> ``b"-> TARGET"``). Symlinked folders are not entered, as ``Path.rglob``.

    ``os.scandir``: an entry's type comes with the folder read, no stat per file (a third of
    ``rglob`` + ``is_file`` + ``read_bytes`` on a lab sysroot's 8,000 files; tests take these
    snapshots before and after every lab case).
    """
    out: dict[str, bytes] = {}

    def walk(folder: str, prefix: str) -> None:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            rel = prefix + e.name
            if e.is_symlink():
                if links:
                    out[rel] = b"-> " + os.fsencode(os.readlink(e.path))
            elif e.is_dir():
                walk(e.path, rel + "/")
            elif e.is_file():
                with open(e.path, "rb") as f:
                    out[rel] = f.read()

    walk(str(root), "")
    return out


def snapshot_fabric(inv_dir: Path) -> dict[str, bytes | str]:
    """Every node sysroot file (bytes) but the traffic counters (:data:`COUNTER_FILES`), and every
    switch's running config (``nv config show -o commands``).

    Keys: ``node01:sys/class/net/enp12s0np0/mtu`` ... and ``leaf01:running-config``.
    """
    from concurrent.futures import ThreadPoolExecutor

    from tuning import inventory
    from tuning.targets.switch import open_driver

    def switch(dev) -> dict[str, str]:
        drv = open_driver(dev)
        try:
            return {f"{dev.name}:running-config": drv.running_config(), f"{dev.name}:revision": drv.current_revision()}
        finally:
            drv.close()

    with ThreadPoolExecutor(max_workers=4) as pool:  # the switches answer while the files are read
        switches = pool.map(switch, inventory.load(inv_dir).switches)
        out: dict[str, bytes | str] = {}
        for node_dir in sorted((inv_dir / ".state" / "nodes").iterdir()):
            out.update({f"{node_dir.name}:{rel}": data for rel, data in tree_files(node_dir / "sysroot").items()
                        if not COUNTER_FILES.match(rel)})
        for part in switches:
            out.update(part)
    return out


# ----- the `lab` marker: on exactly the tests that start or lease a lab; lab start-ups counted -----
#: what starts or leases a lab in a fixture's or test's source
STARTS_A_LAB = re.compile(r"\b(?:running_lab|lab_up|lab_pool|controller\.up|start_lab)\(|\"lab\",\s*\"up\""
                          r"|\bmake\b.*\bdemo\b|molecule")


@functools.cache
def _source_starts_a_lab(func) -> bool:
    """Whether ``func``'s source starts or leases a lab; read once per function (a fixture is in the
    closure of hundreds of tests, and ``inspect.getsource`` tokenizes its whole module each time)."""
    import inspect

    try:
        return bool(STARTS_A_LAB.search(inspect.getsource(func)))
    except (OSError, TypeError):
        return False


def _starts_a_lab(item) -> bool:
    """Whether the test or a fixture in its closure starts or leases a lab (read from their source)."""
    funcs = [getattr(item, "function", None)]
    for defs in getattr(item, "_fixtureinfo", None).name2fixturedefs.values() if hasattr(item, "_fixtureinfo") else ():
        funcs += [d.func for d in defs]
    return any(func is not None and _source_starts_a_lab(func) for func in funcs)


def _sigint_for_children() -> None:
    """A run started in the background by a shell without job control (``make test &``, ``setsid bash -c
    '... &'``) inherits SIGINT ignored, and so would every fabtune the tests start: exec keeps an ignored
    signal, and a Python started with SIGINT ignored never raises KeyboardInterrupt. A test's Ctrl-C to
    its controller then did nothing (a local CI rehearsal: the k8s Ctrl-C test's run went on to exit 0;
    it had passed where an earlier test in the same worker had installed a handler). This process
    takes Python's default handler back, so its children start with SIGINT at its default, as from a
    terminal."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The controlling process puts the run's temporary files in a fresh folder (on tmpfs where it
    has room: :mod:`tests.tmpfs`) unless ``--basetemp`` is given; every process of the run appends
    its lab start-ups to one log (``tuning.lab.controller``); the controlling process names the
    file its workers list the lab modules in. Every process takes Ctrl-C (SIGINT) back from an ignoring
    parent (:func:`_sigint_for_children`)."""
    from tests.xdist_modules import LAB_MODULES_ENV
    from tuning.lab.controller import STARTS_LOG_ENV

    _sigint_for_children()

    if not hasattr(config, "workerinput") and config.option.basetemp is None:
        from tests import tmpfs

        config._fabtune_tmp = tmpfs.make()  # before the tmp_path factory and the workers read it
        config.option.basetemp = str(Path(config._fabtune_tmp) / "t")

    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        import tempfile

        folder = config._fabtune_xdist_folder = tempfile.mkdtemp(prefix="fabtune-xdist-")
        os.environ[LAB_MODULES_ENV] = str(Path(folder) / "lab-modules.txt")  # the workers inherit it

    if STARTS_LOG_ENV not in os.environ:
        import tempfile

        fd, path = tempfile.mkstemp(prefix="fabtune-lab-starts-", suffix=".log")
        os.close(fd)
        os.chmod(path, 0o666)  # labs started as another user (tests/priv/test_userns_mode.py) count too
        os.environ[STARTS_LOG_ENV] = path
        config._fabtune_starts_log = path  # the controlling process owns (and removes) it


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist worksteal`` (pyproject's addopts) keeps each lab test module whole on one worker
    (:mod:`tests.xdist_modules`); other ``--dist`` modes are xdist's own."""
    if config.getoption("dist") != "worksteal":
        return None
    from tests.xdist_modules import ModuleWorkSteal

    return ModuleWorkSteal(config, log)


def pytest_collection_modifyitems(config, items):
    """Mark ``lab`` every test whose own source or fixtures start or lease a lab; the first xdist
    worker lists the modules holding such tests for the scheduler (:mod:`tests.xdist_modules`)."""
    for item in items:
        if item.get_closest_marker("lab") is None and _starts_a_lab(item):
            item.add_marker(pytest.mark.lab)
    from tests.xdist_modules import LAB_MODULES_ENV, write_lab_modules

    if os.environ.get("PYTEST_XDIST_WORKER") == "gw0" and os.environ.get(LAB_MODULES_ENV):
        write_lab_modules(Path(os.environ[LAB_MODULES_ENV]), items)
    if os.environ.get(REVERSE_ENV) == "1":
        items[:] = reversed_within_modules(items)


#: ``FABTUNE_TEST_REVERSE=1 pytest -n 0 ...`` runs each module's tests last to first: a test that
#: leans on an earlier test's state fails (xdist's work stealing can run a module's tests in any order)
REVERSE_ENV = "FABTUNE_TEST_REVERSE"


def reversed_within_modules(items: list) -> list:
    """``items`` with the modules in their order and each module's tests last to first."""
    by_module: dict[str, list] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
    return [item for group in by_module.values() for item in reversed(group)]


def _starts_of(nodeid: str) -> list[str]:
    from tuning.lab.controller import STARTS_LOG_ENV

    try:
        lines = Path(os.environ[STARTS_LOG_ENV]).read_text().splitlines()
    except (KeyError, OSError):
        return []
    return [line for line in lines if line.partition("\t")[2].startswith(nodeid + " ")]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A test without the ``lab`` marker that started a lab is an error: ``-m "not lab"`` must
    start none."""
    yield
    if item.get_closest_marker("lab") is None and _starts_of(item.nodeid):
        pytest.fail(f"{item.nodeid} started a lab but is not marked `lab` (tests/conftest.py "
                    f"STARTS_A_LAB did not see it): mark it", pytrace=False)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The number of lab start-ups in this run, and the tests that caused them."""
    path = getattr(config, "_fabtune_starts_log", None)
    if path is None:
        return
    try:
        lines = Path(path).read_text().splitlines()
    finally:
        Path(path).unlink(missing_ok=True)
    by_test: dict[str, int] = {}
    for line in lines:
        test = line.partition("\t")[2].rsplit(" (", 1)[0] or "(outside a test)"
        by_test[test] = by_test.get(test, 0) + 1
    terminalreporter.section("lab start-ups")
    terminalreporter.write_line(f"{len(lines)} lab start-up(s)")
    for test, n in sorted(by_test.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"  {n:3d}  {test}")
