# make demo : build the virtual environment if needed, run the main job on the embedded lab
# make test : build the virtual environment if needed, run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lab-up lab-down clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# Byte-compile the package: with PYTHONDONTWRITEBYTECODE set (as on CI's image) no interpreter
# writes .pyc, and each of the suite's thousands of starts (CLI, lab daemons, the lab's tool and
# sudo wrappers) would compile the sources again; compileall writes them anyway and skips fresh ones.
BYTECODE = $(BIN)/python -m compileall -q tuning

demo: $(VENV)/.installed
	$(BYTECODE)
	$(BIN)/python -m tuning.demo

# The lab's node shells are unprivileged and reach root through the lab's sudo (docs/lab.md). As
# root (CI) they drop to the `nobody` (or `fabtune`) user; as a normal user the suite runs in a user
# namespace where it is root over its own files, as CI is (needs util-linux `unshare`).
AS_ROOT := $(shell [ "$$(id -u)" = 0 ] || echo unshare --user --map-root-user --)

# Both cores (pytest-xdist, one lab pool per worker, work stealing: addopts in pyproject.toml); the 25 slowest tests and the
# lab start-ups are printed at the end. `pytest -m "not lab"` is the fast tier: it starts no lab.
# The suite's temporary files go in a fresh folder on tmpfs where /dev/shm has room, removed when
# the run passes (tests/tmpfs.py, from tests/conftest.py: a plain `pytest` gets the same).
test: $(VENV)/.installed
	$(BYTECODE)
	$(AS_ROOT) $(BIN)/python -m pytest -q -p no:cacheprovider --durations=25

lab-up: $(VENV)/.installed
	$(BIN)/fabtune lab up

lab-down: $(VENV)/.installed
	$(BIN)/fabtune lab down

clean:
	rm -rf $(VENV) .fabtune inventory/lab/.state
