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
# The suite's temporary files (pytest's tmp_path, the lab pools: about 3 GB in some 10^5 small
# files, most written and deleted within seconds) go in a fresh folder on tmpfs when /dev/shm has
# 8 GB free: on a journal-less ext4, as CI's disk is, each file creation scans the inode table
# for recently deleted inodes, and a lab start spent half its time (3.7 s of 7.5) creating files.
# Elsewhere they go under $$TMPDIR (else /tmp) as before. The folder is removed at the end; its
# short name and --basetemp keep the lab's unix sockets (<state>/run/sudo/node01.sock) within
# AF_UNIX's 108 bytes, shorter than /tmp/pytest-of-USER/pytest-N/ gave them.
# tmpfs also caps its inodes (half the RAM's pages: 3.1 million on 24 GiB), and a lab node's sysroot
# is ~14,000 of them: it must have 1.5 million free too (a passed test's tmp_path is removed at
# its teardown, pyproject.toml, so the run's peak stays far below).
TEST_TMP_PARENT = $(shell df -k --output=avail,iavail /dev/shm 2>/dev/null | awk 'NR == 2 && $$1 > 8388608 && $$2 > 1500000 { print "/dev/shm" }')

test: $(VENV)/.installed
	$(BYTECODE)
	tmp=$$(mktemp -d -p "$(or $(TEST_TMP_PARENT),$${TMPDIR:-/tmp})" ft.XXXXXX) && chmod 1777 "$$tmp" && \
	{ TMPDIR="$$tmp" $(AS_ROOT) $(BIN)/python -m pytest -q -p no:cacheprovider --durations=25 \
	  --basetemp="$$tmp/t"; \
	  rc=$$?; rm -rf "$$tmp" 2>/dev/null; exit $$rc; }

lab-up: $(VENV)/.installed
	$(BIN)/fabtune lab up

lab-down: $(VENV)/.installed
	$(BIN)/fabtune lab down

clean:
	rm -rf $(VENV) .fabtune inventory/lab/.state
