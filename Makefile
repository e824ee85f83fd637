# Two commands on a fresh machine (Python 3.11 + pip): `make demo`, `make test`.
# `make docs` builds the documentation site into site/.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: demo test lint format docs bench figures clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The main job: every figure at quick resolution (PNG, PDF and netCDF in figures/).
demo: $(STAMP)
	$(VENV)/bin/samflow figures --quick --out figures

figures: $(STAMP)
	$(VENV)/bin/samflow figures --out figures

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The site, warnings as errors: a broken link or anchor, a missing page or picture, or a
# public name without a reference entry fails. (Not --quiet: it hides the warnings from
# --strict, and a broken link would pass.)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The tests always end: a test past its own limit (pytest-timeout, pyproject.toml) ends
# its worker, a worker that dies ends the run (--max-worker-restart 0: xdist's restart
# of a crashed worker under --dist loadfile can leave the run waiting for ever), and the
# whole run is stopped after TEST_LIMIT seconds. PYTEST_ARGS: a subset or more options
# (make test PYTEST_ARGS="tests/test_rules.py -x").
TEST_LIMIT ?= 4800
PYTEST_ARGS ?=
test: lint docs
	@timeout --kill-after=30 $(TEST_LIMIT) $(PY) -m pytest -n 2 --dist loadfile --max-worker-restart 0 -q --durations=15 $(PYTEST_ARGS); \
	rc=$$?; \
	if [ $$rc -eq 124 ] || [ $$rc -eq 137 ]; then \
		echo "make test: the test run passed its limit of $(TEST_LIMIT) s and was stopped" >&2; \
	fi; \
	exit $$rc

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Optional benchmark dependencies (PyTorch); the bench skips what is missing.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]' || echo "bench extras not installed: the torch baseline will be skipped"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.bench

clean:
	rm -rf out site .pytest_cache
