# The two commands of the README: `make demo` (set up + run the main job) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := constraints.txt
# Where pip takes torch from, for torch alone (README: Install). Empty: pip's default index, which on
# these machines resolves to the local CPU wheel and elsewhere on Linux to the CUDA build (several GB).
# For the CPU-only build anywhere: make demo TORCH_INDEX_URL=<PyTorch's CPU-only wheel index>
TORCH_INDEX_URL ?=
TORCH_INDEX := $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL),)
# Test processes (pytest-xdist): auto = one per core, each test file in one process (--dist loadfile, so a
# module's fixtures are built once); 0 runs the suite in this process: make test TEST_WORKERS=0
TEST_WORKERS ?= auto

.PHONY: demo test install install-dev verify report bench doctor clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: $(PY) pyproject.toml $(CONSTRAINTS)
	$(PIP) install -q -c $(CONSTRAINTS) $(TORCH_INDEX) torch==2.13.0
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[channel]'
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[dev,channel]'
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

demo: install          ## set up and run the main job: every stage of the paper, verified
	$(VENV)/bin/tmin verify

test: install-dev      ## set up and run the test suite
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

doctor: install        ## the machine, torch build, precision and files: paste it into a bug report
	$(VENV)/bin/tmin doctor

report: install
	$(VENV)/bin/tmin report --out runs/report

bench: install
	$(PY) benchmarks/bench_attention.py

clean:
	rm -rf $(VENV) runs .pytest_cache
