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

demo: $(VENV)/.installed
	$(BIN)/python -m tuning.demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q -p no:cacheprovider

lab-up: $(VENV)/.installed
	$(BIN)/fabtune lab up

lab-down: $(VENV)/.installed
	$(BIN)/fabtune lab down

clean:
	rm -rf $(VENV) .fabtune inventory/lab/.state
