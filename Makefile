# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# `make test-fast` leaves out the tests marked slow (README: Contributing).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# pytest-xdist workers: many tests wait on servers, workers and subprocesses, so two workers on 2 cores
# finish the suite in ~20 minutes where one took over 30 (README: Contributing)
TEST_WORKERS ?= 2

.PHONY: demo test test-fast lint format venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: on these machines 2.13.0 is a CPU build on local disk;
	# anything else would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mopt generate --prompt "The Python language is" --prompt "def fibonacci(n):" --max-tokens 32 --temperature 0.7 --top-p 0.9 --seed 0

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: $(STAMP) lint
	# one intra-op thread: tiny test models are slower with OpenMP threads spinning on 2 cores
	OMP_NUM_THREADS=1 TRITON_INTERPRET=1 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS)

test-fast: $(STAMP) lint
	OMP_NUM_THREADS=1 TRITON_INTERPRET=1 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) -m "not slow"

clean:
	rm -rf $(VENV)
