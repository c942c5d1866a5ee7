#!/usr/bin/env bash
# Concurrent request merging (FalconFS §4.4) on real processes: two `cairn up`
# clusters on this machine, one whose meta nodes merge concurrent requests of
# a partition into one Raft proposal and log write (the default) and one
# started with --meta-merge=false, driven in one `cairn bench run` by the same
# metadata workload through the SDK (`cairn:` targets, no FUSE). The cluster
# with merging is the first target, so the report's ratios read
# "without merging / with merging".
#
#   bench/meta-merging.sh [--out DIR] [--files N] [--threads N] [--repetitions N]
#
# Defaults: --files 500 per thread, --threads 32, --repetitions 2 (a few
# minutes on 2 cores). `make bench-merging` runs it. Both clusters are stopped
# on exit, also on failure or Ctrl-C; the report is kept.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
out=$REPO/bench-reports/meta-merging-$(date -u +%Y%m%dT%H%M%SZ)
files=500
threads=32
reps=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }

WORK=$(mktemp -d /var/tmp/cairn-merge.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  set +e
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "cairn up $pid still alive after 60 s: SIGKILL" >&2; kill -KILL "$pid"; }
    wait "$pid" 2>/dev/null
  done
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME ARGS...: cairn up without a mount, waits until it is up.
start() {
  local name=$1; shift
  echo "starting cairn up ($name) on $WORK/$name"
  "$CAIRN" up --data-dir "$WORK/$name" --mount "" "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  local pid=$!
  for _ in $(seq 1 900); do
    grep -q "Cairn is up" "$WORK/$name.log" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "error: cairn up ($name) exited:" >&2; cat "$WORK/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "error: cairn up ($name) not up after 90 s" >&2; exit 1
}
master_of() {
  "$CAIRN" status --data-dir "$WORK/$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"])'
}

start merging
start no-merging --meta-merge=false
on=$(master_of merging)
off=$(master_of no-merging)

cat >"$WORK/workloads.yaml" <<YAML
# meta-merging: create/stat/remove through the SDK, many concurrent clients
repetitions: $reps
defaults:
  threads: $threads
  duration: 120s
workloads:
  - kind: metadata
    name: creates-$threads-threads
    files: $files
    phases: [FileCreation, FileStat, FileRemoval]
YAML
mkdir -p "$out"
cp "$WORK/workloads.yaml" "$out/workloads.yaml"
echo "running cairn bench: merging (cairn:$on/default) first, then no merging (cairn:$off/default)"
"$CAIRN" bench run -f "$WORK/workloads.yaml" --progress lines --progress-interval 30s \
  --target "cairn:$on/default?tls=$WORK/merging/tls/admin" --target "cairn:$off/default?tls=$WORK/no-merging/tls/admin" --out "$out"
echo
echo "report: $out/report.json and $out/report.html (ratios are without / with merging)"
