# Everything a fresh machine needs (Python 3.11, Java 17, Maven) is set up by these targets.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: setup demo test test-fast test-unit lint bench clean kafka-stop servers-stop debian-tools prometheus kcat postgresql

setup: $(STAMP) .ingest/jars/.ready

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

.ingest/jars/.ready: $(STAMP) ingestion/runtime/jars.py $(wildcard ingestion/runtime/data/*.java)
	$(BIN)/ingest jars
	touch $@

demo: setup
	$(BIN)/ingest demo

# Parallel workers (pytest-xdist): much of the suite waits on brokers, triggers and subprocesses; on 2 cores two
# workers beat one process and three lost to it (docs/performance.md, CI row). They share one broker
# (tests/conftest.py) and a file with a costly module fixture runs on one worker (`--dist loadgroup`).
# TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
# The suite's Python processes (its workers, every `ingest` command and MLflow store it starts) keep the bytecode
# they compile: where the environment sets PYTHONDONTWRITEBYTECODE, each of some 300 processes compiled ingest's
# modules from source again, and each worker rewrote every test module's asserts (collection 6.9 -> 3.2 CPU s).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest

test: setup debian-tools prometheus kcat postgresql
	$(PYTEST) tests -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The Debian packages of the three targets below that are missing, installed by one `apt-get update` and one
# `apt-get install` (a fresh machine paid one update per package before). The services the packages may start are
# stopped, as each target does. Should that install fail, each target still tries its own package and fails
# saying which one it could not install.
DEBIAN_MISSING = $(strip \
  $(if $(shell command -v promtool >/dev/null && command -v prometheus >/dev/null && echo y),,prometheus) \
  $(if $(shell { command -v kcat || command -v kafkacat; } >/dev/null && echo y),,kcat) \
  $(if $(shell { command -v initdb || ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1 && echo y),,postgresql))

debian-tools:
	@[ -z "$(DEBIAN_MISSING)" ] || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $(DEBIAN_MISSING) \
	  && for service in $(filter prometheus postgresql,$(DEBIAN_MISSING)); do \
	    [ ! -x /etc/init.d/$$service ] || /etc/init.d/$$service stop >/dev/null 2>&1 || true; done; } || true

# Debian's prometheus package: `promtool` checks and unit-tests the shipped alert rules, and the e2e test starts a
# `prometheus` of its own (docs/operations.md#prometheus). Installed only when missing (as root in CI; a developer
# without root runs the same apt-get with sudo). The package's service is not left running: its init script is
# told to stop it, in case the machine started it on install (the test starts its own on a free port).
prometheus:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
	  && { [ ! -x /etc/init.d/prometheus ] || /etc/init.d/prometheus stop >/dev/null 2>&1 || true; }; }

# Debian's kcat: the JSON acceptance test produces plain JSON with a producer that is not Python
# (tests/integration/test_json.py). Installed only when missing, as prometheus is; where apt cannot provide it this
# target fails, saying so (the test skips without kcat on a developer's machine, and fails in CI).
kcat:
	@command -v kcat >/dev/null || command -v kafkacat >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kcat; } \
	  || { echo "kcat could not be installed (Debian's kcat package): tests/integration/test_json.py needs it"; exit 1; }

# Debian's postgresql: the source database of the real Debezium test (tests/e2e/test_debezium.py), which starts a
# cluster of its own (initdb in a temporary folder, as the `postgres` user when run as root, a free loopback port)
# and Debezium's connector in Kafka Connect standalone (jars by `ingest jars --debezium`, or on first use).
# Installed only when missing, as prometheus is; the cluster the package creates and may start is stopped.
postgresql:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
	  && { [ ! -x /etc/init.d/postgresql ] || /etc/init.d/postgresql stop >/dev/null 2>&1 || true; }; }

# The tiers a developer runs between `make test`s (markers set by tests/conftest.py): neither needs Java, the jars
# (Maven) or a Debian package; `make test-fast` adds the integration tests that start no JVM (a local S3 server).
TIER := -m "not jvm and not debian" --durations=10

test-unit: $(STAMP)
	$(PYTEST) tests/unit $(TIER)

test-fast: $(STAMP)
	$(PYTEST) tests/unit tests/integration $(TIER)

lint: setup
	$(BIN)/ruff check ingestion tests benchmarks
	$(BIN)/mypy ingestion
	$(BIN)/lint-imports

# Throughput, freshness and memory against a hand-written Spark job and the raw limits (see benchmarks/bench.py);
# pass options with BENCH_ARGS="--records 200000 --repeat 1".
bench: setup
	$(BIN)/python benchmarks/bench.py $(BENCH_ARGS)

kafka-stop:
	-$(BIN)/ingest kafka stop

# The SQL and Spark Connect servers and the local catalog's Derby server, by their pids (docs/catalog.md).
servers-stop:
	-$(BIN)/ingest sql-server stop
	-$(BIN)/ingest connect-server stop
	-$(BIN)/ingest metastore stop

clean: kafka-stop servers-stop
	rm -rf .ingest spark-warehouse
