# The two commands of the README. Each creates or updates .venv itself on a fresh machine.
#   make demo   run the pipeline flow on the embedded default (configs/demo.yaml);
#               `make demo SEED=1` varies the tasks (synthetic.seed) and the student's init (student.tiny.seed)
#   make test   install everything needed, then lint (ruff), type-check (mypy) and run the test suite
#               (the suite includes the import contracts: tests/test_import_contracts.py runs lint-imports)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Local Prefect: no telemetry (its heartbeat can trip SQLite "database is locked" on first start).
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 90

.PHONY: demo test test-fast test-zero3 golden lint typecheck bench docs docs-serve sysdeps uideps pgdeps venv clean

venv: $(STAMP)

# torch first, from the local CPU wheel (any other torch pulls a multi-GB CUDA build); the benchmarks'
# graders last, without their dependencies (pyproject.toml [tool.coa.graders] says why).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[dev,ray]'
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps $$($(BIN)/python -c \
	  "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['tool']['coa']['graders']['no-deps']))")
	touch $(STAMP)

# System packages the sandbox needs (bubblewrap); installed when missing and we are root.
sysdeps:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "note: bubblewrap (bwrap) is missing; sandbox tests need it: sudo apt-get install bubblewrap"; fi; }

# Headless Chromium for the Prefect UI check of the slow tier (skipped with the reason without it).
uideps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
	    || echo "note: could not install chromium; the Prefect UI check will be skipped"; \
	  else echo "note: chromium is missing; the Prefect UI check needs it: sudo apt-get install chromium"; fi; }

# PostgreSQL server binaries: the slow tier's Prefect server runs on PostgreSQL (tests/flows/postgres.py).
pgdeps:
	@test -x "$$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)/initdb" || command -v initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq postgresql >/dev/null) \
	    || echo "note: could not install postgresql; the Prefect server tests will fail until it is installed"; \
	  else echo "note: PostgreSQL is missing; the Prefect server tests need it: sudo apt-get install postgresql"; fi; }

# SEED (optional) overrides both of the demo's seeds; unset, the profile's own (0) hold.
SEED ?=
demo: $(STAMP) sysdeps
	$(BIN)/coa run --config configs/demo.yaml $(if $(SEED),synthetic.seed=$(SEED) student.tiny.seed=$(SEED))

# The suite on TEST_WORKERS pytest-xdist workers (each with one torch thread: tests/conftest.py), then the
# `serial` tier alone (tests that time themselves or scan the machine's processes). Both always run.
# The modules holding `slow` tests are scheduled first (tests/conftest.py), so the two workers end together.
# mypy runs beside the parallel tier (a clean clone's cold run is ~155 CPU-s, and the tier leaves ~1/4 of
# the cores idle while its tests wait on servers and workers); its report is printed after the tier, and
# it has finished before the serial tier starts.
TEST_WORKERS ?= 2
test: $(STAMP) sysdeps uideps pgdeps lint
	types_log=$$(mktemp); $(BIN)/mypy >"$$types_log" 2>&1 & types_pid=$$!; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not serial" --durations=25; parallel=$$?; \
	wait $$types_pid; types=$$?; echo "--- mypy (make typecheck), run beside the tests:"; cat "$$types_log"; \
	rm -f "$$types_log"; \
	$(BIN)/python -m pytest -q -m serial; serial=$$?; \
	test $$types = 0 && test $$parallel = 0 && test $$serial = 0

# ZeRO-3 on two CPU ranks: the `[zero3]` cases that `make test` skips (its install has no DeepSpeed).
# .venv-zero3 reads .venv's packages (a .pth) and adds the `deepspeed` extra's pin beside the pinned
# torch; the first run on a machine JIT-builds one DeepSpeed op (~2 min on 2 cores), later runs reuse it.
ZERO3 := .venv-zero3
test-zero3: $(STAMP)
	test -x $(ZERO3)/bin/python || $(BIN)/python -m venv --without-pip $(ZERO3)
	$(BIN)/python -c "import site; print('import site; site.addsitedir(%r)' % site.getsitepackages()[0])" \
	  > $$($(ZERO3)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/coa-venv.pth
	$(ZERO3)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
	  $$($(BIN)/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['deepspeed'])")
	$(ZERO3)/bin/python -m pytest -q -p no:cacheprovider -k zero3 tests/train/test_multi_rank.py tests/rl/test_ranks.py

# Development: skip the slow end-to-end tier (Prefect server + worker, CLI subprocess runs).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# Rewrite the golden files (tests/golden/) after an intended change; review the diff like code.
golden: $(STAMP)
	COA_UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q tests/test_golden.py tests/test_summary_contracts.py

lint: $(STAMP)
	$(BIN)/ruff check coa schemas tasks flows tests bench
	$(BIN)/ruff format --check coa schemas tasks flows tests bench
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

# The quick set (bench/quick.py): every bench that needs neither a GPU nor a demo run, at --quick, each
# through the harness (bench/harness.py). BENCH_ARGS narrows it: `make bench BENCH_ARGS="--only bench_contract"`.
BENCH_ARGS ?=
bench: $(STAMP) sysdeps
	cd bench && PYTHONPATH=.. ../$(BIN)/python quick.py $(BENCH_ARGS)

# The documentation site (mkdocs.yml, docs/): the reference pages are generated from the code.
# Strict: a broken link or a page missing from the nav fails. Output in site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict -d site

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve -a 127.0.0.1:8000

clean:
	rm -rf $(VENV) .coa .pytest_cache site .venv-twin .twin .whl .gpu
