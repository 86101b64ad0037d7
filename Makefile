# The two commands that set up everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_DB ?= sluice-demo.db

.PHONY: run test lock peers celery-suite bench-celery lint typecheck unit bench bench-postgres bench-content bench-isolation bench-spark bench-jobs bench-memory bench-topics bench-rules bench-server bench-sqs bench-gateways soak soak-mixed campaign clean

$(BIN)/sluice-run-stamp: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[demo]'
	touch $@

# The console's browser tests drive Debian's chromium (Playwright's own download cannot work here);
# the reliability tests step real processes' wall clocks with Debian's libfaketime. The bench
# extra too: tests/acceptance/test_bench.py runs every benchmark family, peers and all, at its
# smallest settings, so that bench code cannot rot.
$(BIN)/sluice-test-stamp: pyproject.toml constraints.txt
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)
	command -v faketime >/dev/null || (apt-get update && apt-get install -y faketime)
	test -x /usr/sbin/pgbouncer || (apt-get update && apt-get install -y pgbouncer)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[all,dev,bench]'
	$(MAKE) peers
	touch $@

# Peers' own test suites, run unchanged against sluice by tests/contrib: the sdists of kombu,
# Celery and moto (their tests ship in them; moto's SQS tests run against sluice's SQS
# endpoint) of the versions installed, unpacked under .peers/.
PEERS := .peers
peers:
	mkdir -p $(PEERS)
	for p in kombu celery moto; do \
	  v=$$($(BIN)/python -c "import importlib.metadata as m; print(m.version('$$p'))"); \
	  test -d $(PEERS)/$$p-$$v || ( \
	    $(BIN)/pip download --quiet --no-deps --no-binary :all: "$$p==$$v" -d $(PEERS) && \
	    tar -xzf $(PEERS)/$$p-$$v.tar.gz -C $(PEERS) ); \
	done

# Pins every package of the test environment at what .venv holds now. To move to newer
# releases: delete the pins from constraints.txt, `make clean test`, then `make lock`.
lock: $(BIN)/sluice-test-stamp
	{ sed -n '/^#/p' constraints.txt; $(BIN)/pip freeze --exclude-editable; } > constraints.tmp
	mv constraints.tmp constraints.txt

$(BIN)/sluice-bench-stamp: $(BIN)/sluice-test-stamp
	touch $@

run: $(BIN)/sluice-run-stamp
	rm -f $(RUN_DB) $(RUN_DB)-wal $(RUN_DB)-shm
	$(BIN)/sluice demo --db $(RUN_DB)

lint: $(BIN)/sluice-test-stamp
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports

typecheck: $(BIN)/sluice-test-stamp
	$(BIN)/mypy

# The tests marked serial (they time themselves against the wall clock) alone, then all the
# others in parallel: most tests wait on fsync, child processes or a JVM, so more workers
# than cores pay. Both runs go to the end; either one failing fails the target. (Tests are
# dealt one by one: --dist loadgroup groups nothing under pytest 9.2, pytest-xdist issue 1386;
# worksteal: a worker that runs out takes pending tests from the others, so the run does not
# end on one worker's queue of minute-long Spark tests.) The 15 slowest are listed at the end,
# so CI's log shows where the suite's time goes.
TEST_WORKERS ?= 4
test: lint typecheck
	$(BIN)/pytest -m serial; serial=$$?; \
	$(BIN)/pytest -m 'not serial' -n $(TEST_WORKERS) --dist worksteal --durations=15; parallel=$$?; \
	test $$serial -eq 0 -o $$serial -eq 5 && test $$parallel -eq 0

bench: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench cycle
	$(BIN)/python -m bench concurrent

# PostgreSQL at 127.0.0.1:5432 and RabbitMQ at 127.0.0.1:5672, as on this project's machines.
# Celery on sluice (SQLite, PostgreSQL) against Celery on Redis (appendfsync always) and on
# RabbitMQ (durable queues, publisher confirms): no-op and 10 ms tasks through 4 worker
# processes, then workers killed mid-task (lost and run-twice counts).
# Celery's own integration suite (from its sdist) against sluice+sqlite and sluice+postgresql,
# results backend Redis at 127.0.0.1:6379 (about 8 minutes; docs/celery.md lists the results).
celery-suite: $(BIN)/sluice-test-stamp
	$(BIN)/python -m tests.contrib.celery_suite sqlite; \
	$(BIN)/python -m tests.contrib.celery_suite postgresql

bench-celery: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench celery

bench-postgres: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench postgres
	$(BIN)/python -m bench wakeup
	$(BIN)/python -m bench backlog

# A queue of 1,000,000 typed orders on SQLite and PostgreSQL (about 15 minutes).
bench-content: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench content

bench-isolation: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench isolation

# Spark on local[2] (Java 17+), PostgreSQL at 127.0.0.1:5432, and its JDBC driver for the peer.
bench-spark: $(BIN)/sluice-bench-stamp
	test -f /usr/share/java/postgresql.jar || (apt-get update && apt-get install -y libpostgresql-jdbc-java)
	$(BIN)/python -m bench spark

# No-op tasks through 4 worker processes: sluice on SQLite and PostgreSQL, Celery, Dramatiq
# and RQ on Redis (the shared one, and a private one with appendfsync always), procrastinate.
bench-jobs: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench jobs

# Resident memory of a worker (SQLite, PostgreSQL) and a Spark stream draining 1,000,000
# messages, against the bounds tests/reliability/test_memory.py holds (about 10 minutes).
bench-memory: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench memory

# The fault campaign (tests/reliability/campaign.py), 5 minutes a backend: SQLite on a tmpfs it
# fills (root mounts it), PostgreSQL on a private cluster it crashes. Report in bench/results/.
campaign: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m tests.reliability.campaign --seconds $${SECONDS_PER_BACKEND:-300} --seed $${SEED:-1}

# Topics with 1, 10 and 100 subscriptions against a plain queue and RabbitMQ's fanout, on a
# SQLite file and PostgreSQL (127.0.0.1:5432), RabbitMQ at 127.0.0.1:5672 (about 5 minutes).
bench-topics: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench topics

# The rules engine against the same logic written with sluice's Python API (routing,
# Demaq's procurement, latency), on a SQLite file and PostgreSQL (127.0.0.1:5432), about 5 minutes;
# then the same rules on Spark (local[2]) against the local engine (bench/rules/spark.py).
bench-rules: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench rules
	$(BIN)/python -m bench rules-spark

# The HTTP server (sluice serve) against the in-process API, RabbitMQ's management API (the
# bench enables its plugin when it is off) and a bare Starlette route, on a SQLite file and
# PostgreSQL (127.0.0.1:5432), RabbitMQ at 127.0.0.1:5672, about 5 minutes.
bench-server: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench server

# The SQS endpoint (boto3 batches of 10, one SendMessage's latency) against sluice's own HTTP
# API and its Python API, on a SQLite file and PostgreSQL (127.0.0.1:5432), about 5 minutes.
bench-sqs: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench sqs

# Dropbox directories (sluice.dropbox): ingest and emit against the file system's floor
# (create + write + fsync + rename), on a SQLite file and PostgreSQL (127.0.0.1:5432).
bench-gateways: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench gateways

soak: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench soak

# Queues, topics, rules and HTTP at once for 30 minutes a backend at half the machine's maximum
# for the mix (SQLite, then PostgreSQL at 127.0.0.1:5432); per-window figures and drift.
soak-mixed: $(BIN)/sluice-bench-stamp
	$(BIN)/python -m bench soak-mixed

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
