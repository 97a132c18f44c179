#!/usr/bin/env bash
# One round of the issue-20 sitting: quorumlog's replicated shapes against the bare data path
# and the peers, each run from its own tool folder, alternating, in this order: bare async,
# quorumlog async, NATS async, bare sync, quorumlog sync, etcd, quorumlog single, NATS seq,
# quorumlog 64, NATS py64. The references are run where they live (../shared/tools), never
# copied here. Results go to $OUT/r$N/; bench/sitting/summary.py prints the medians table.
#
#   OUT=/tmp/sit QL=/work/main/.venv/bin/quorumlog BPV=<venv with uvloop, crc32c> \
#     bash bench/sitting/round.sh N
#
# Needs the peers installed (../shared/tools/peers/setup.sh: /tmp/peers/bin/{jsbench,etcdbench},
# /tmp/peers/venv) and a venv for the bare path (`python3 -m venv V && V/bin/pip install uvloop
# crc32c`). Every server a step starts is stopped by its tool's stop command on exit.
set -euo pipefail
N=${1:?round number}
HERE=$(cd "$(dirname "$0")" && pwd)
TOOLS=${TOOLS:-$(cd "$HERE/../../../shared/tools" 2>/dev/null && pwd || echo /work/shared/tools)}
OUT=${OUT:?set OUT to the sitting folder}; QL=${QL:?set QL to the quorumlog executable}
BPV=${BPV:?set BPV to the bare path venv}
PEERS=$TOOLS/peers; BIN=${BIN:-/tmp/peers/bin}; PPY=${PPY:-/tmp/peers/venv/bin/python}
R=$OUT/r$N; mkdir -p "$R"
trap '"$PEERS/nats_cluster.sh" stop >/dev/null 2>&1 || true; "$PEERS/etcd_cluster.sh" stop >/dev/null 2>&1 || true' EXIT
load() { echo "$(date -u +%H:%M:%S) $1 load $(cut -d' ' -f1 /proc/loadavg)" >> "$R/times.txt"; }

bare() {  # $1 = 0 async, 1 sync
  load "bare sync=$1"
  (cd "$TOOLS/barepath" && BAREPATH_PY="$BPV/bin/python" timeout 300 python3 runner.py \
    "{\"loop\":\"uvloop\",\"sync\":$1,\"batch\":1048576,\"window\":8,\"crc\":\"crc32c\"}" \
    --reps 1 --dur 5) > "$R/bare_$1.txt" 2>&1
}
ql() {  # $1 = name, rest = cluster options
  local name=$1; shift
  load "quorumlog $name"
  mkdir -p "$R/ql_$name" && (cd "$R/ql_$name" && timeout 600 "$QL" bench --no-references \
    --warm-gib 0 --json "$R/ql_$name.json" cluster --duration 5 "$@") > "$R/ql_$name.txt" 2>&1
  rm -rf "$R/ql_$name"
}
nats() {  # $1 = name, rest = command after the urls are known
  local name=$1; shift
  load "nats $name"
  "$PEERS/nats_cluster.sh" start 3 > /dev/null
  local U; U=$(cat /tmp/peers/run/nats/urls)
  case $name in
    async) timeout 300 "$BIN/jsbench" -url "$U" -replicas 3 -async 2000 -total 200000 -size 1024 -label "nats-async-r$N" ;;
    seq)   timeout 300 "$BIN/jsbench" -url "$U" -replicas 3 -clients 1 -total 3000 -size 1024 -label "nats-seq-r$N" ;;
    py64)  timeout 300 "$PPY" "$PEERS/nats_py_bench.py" "$U" 3 1024 64 30000 "nats-py64-r$N" ;;
  esac > "$R/nats_$name.txt" 2>&1 || true
  "$PEERS/nats_cluster.sh" stop > /dev/null
}
etcd() {
  load "etcd 1000 clients"
  "$PEERS/etcd_cluster.sh" start 3 > /dev/null
  local L
  L=$(ETCDCTL_API=3 etcdctl --endpoints "$(cat /tmp/peers/run/etcd/endpoints)" endpoint status -w json |
      python3 -c "import json,sys;d=json.load(sys.stdin);print([e['Endpoint'] for e in d if e['Status']['leader']==e['Status']['header']['member_id']][0].replace('http://',''))")
  timeout 300 "$BIN/etcdbench" -endpoints "$L" -clients 1000 -conns 100 -total 100000 \
    -val-size 1024 -key-size 8 -label "etcd-sat-r$N" > "$R/etcd.txt" 2>&1 || true
  "$PEERS/etcd_cluster.sh" stop > /dev/null
}

bare 0; ql async; nats async
bare 1; ql sync --flush sync; etcd
ql single --producers 1 --batch 1 --window 1; nats seq
ql p64 --producers 64 --batch 1 --window 1 --flush sync; nats py64
load "end"
