# Two entry points on a fresh machine: `make test` and `make bench`.
# Both create .venv if missing and install the project (with its extras) from this tree.
# `make bench` is `quorumlog bench` (the default suite, one table; BENCH_ARGS adds options,
# e.g. BENCH_ARGS="--json bench.json"); `make microbench` runs the pytest-benchmark
# micro-benchmarks in bench/.
PY ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SRCS := $(shell find csrc src spark -type f \( -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.c' -o -name '*.h' -o -name '*.java' -o -name '*.py' \) 2>/dev/null) setup.py pyproject.toml
EXTRAS ?= test,spark

.PHONY: test bench microbench install clean soak soak-node soak-node-groups cluster-soak soak-cluster flood

$(VPY):
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip

$(STAMP): $(VPY) $(SRCS)
	$(VPY) -m pip install -q -e ".[$(EXTRAS)]"
	@# pip builds the project before it installs the spark extra, so the jar is compiled here,
	@# against the venv's pyspark; a javac failure fails make (no javac: a warning).
	$(VPY) spark/build_jar.py src/quorumlog
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(VPY) -m pytest tests -q -p no:cacheprovider $(PYTEST_ARGS)

bench: $(STAMP)
	$(VENV)/bin/quorumlog bench $(BENCH_ARGS)

microbench: $(STAMP)
	$(VPY) -m pytest bench -q -p no:cacheprovider --benchmark-only $(PYTEST_ARGS)

soak: $(STAMP)
	$(VPY) -m quorumlog.testing.soak --seeds 100000 -j 2

# the real Node under deterministic simulation (docs/reliability.md); START=n moves the seeds
START ?= 0
soak-node: $(STAMP)
	PYTHONHASHSEED=0 $(VPY) -m quorumlog.testing.nodesim --seeds 20000 --start $(START) -j 2

# the same over NodeHosts of GROUPS Raft groups per simulated process (quiescence, batched
# heartbeats, leader balance; one checker per group)
GROUPS ?= 4
soak-node-groups: $(STAMP)
	PYTHONHASHSEED=0 $(VPY) -m quorumlog.testing.nodesim --seeds 5000 --start $(START) --groups $(GROUPS) -j 2

# the leader kill -9 test with 20 kills instead of 3 (a few minutes)
cluster-soak: $(STAMP)
	QUORUMLOG_CLUSTER_KILLS=20 $(VPY) -m pytest tests/cluster/test_cluster_failover.py -q -p no:cacheprovider -s

# Jepsen-style fault testing of a 3-replica group of real processes (docs/reliability.md):
# 500 kills and every other nemesis, sync flush; up to an hour. SEED=n replays a plan;
# SOAK_ARGS overrides options (the last one wins), e.g. SOAK_ARGS="--kills 60 --duration 900".
SEED ?=
soak-cluster: $(STAMP)
	$(VPY) -m quorumlog.testing.faults $(if $(SEED),--seed $(SEED)) --flush sync --kills 500 \
		--kill-target mixed --all-nemeses --rate 50 --disk-size-mb 1536 --duration 3600 \
		$(SOAK_ARGS)

# floods (connections, stalled frames, handshakes) against 3 replicas under load;
# not part of `make test` (3 minutes per flood by default: FLOOD_S=60 for a shorter run)
flood: $(STAMP)
	$(VPY) -m quorumlog.testing.flood --duration $(or $(FLOOD_S),180)

clean:
	rm -rf build $(VENV) src/*.egg-info
	find csrc -name '*.c' ! -name 'crc32c.c' -delete; find src -name '*.so' -delete
