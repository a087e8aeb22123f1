# The two README commands: `make run` (main job) and `make test` (test suite).
# Each creates .venv and installs the package with every extra on first use.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: run test test-slow bench install clean

$(STAMP): pyproject.toml constraints/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints/cpu.txt -e '.[all]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m figures

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow || [ $$? -eq 5 ]  # exit 5: no test selected

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

# Mutation testing of the core (issue 19; mutation/README.md). Too slow for CI: one file takes
# minutes to an hour. `make mutate FILES=simulate/delays.py` runs one file; FILES empty = all.
.PHONY: mutate
FILES ?=
mutate: $(STAMP)
	$(PY) -c "import cosmic_ray" 2>/dev/null || $(PY) -m pip install -q -c constraints/cpu.txt -e '.[mutation]'
	$(PY) mutation/run.py $(FILES)
