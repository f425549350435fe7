# The two commands of the README: `make demo` (set up + run the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := constraints.txt

.PHONY: demo test install install-dev verify report bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: $(PY) pyproject.toml $(CONSTRAINTS)
	$(PIP) install -q -c $(CONSTRAINTS) torch==2.13.0
	$(PIP) install -q -c $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[dev,channel]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

demo: install          ## set up and run the main job: every stage of the paper, verified
	$(VENV)/bin/tmin verify

test: install-dev      ## set up and run the test suite
	$(PY) -m pytest -q

report: install
	$(VENV)/bin/tmin report --out runs/report

bench: install
	$(PY) benchmarks/bench_attention.py

clean:
	rm -rf $(VENV) runs .pytest_cache
