#!/usr/bin/env bash
# The deep-learning traversal (FalconFS §6.4) on Cairn, three ways in one
# `cairn bench run`, with the metadata requests per open counted by the meta
# nodes themselves (their /metrics, read before and after every epoch):
#
#   1. cairn-cached:  the SDK client that resolves paths itself with a warm,
#                     unbounded directory cache (the reference, first target);
#   2. cairn:         the stateless client: no metadata cache, every call one
#                     path request to the meta partition of the last name;
#   3. posix:MOUNT    a FUSE mount with the kernel's caches off
#                     (cairn mount -o entry_timeout=0,attr_timeout=0).
#
# It starts a fresh `cairn up`, builds the tree once with the stateless
# client (a kept tree, key `tree`: every target of the measured run finds it
# complete; the cached client's setup walks it, which warms its cache), reads it
# in random order for --epochs epochs per target (each bounded by
# --duration), and prints the throughput ratio stateless ÷ cached and the
# meta nodes' requests per open of each target for the last epoch (the
# first ones warm up). Ratios in the report are to cairn-cached.
#
#   bench/dl-traversal.sh [--out DIR] [--dirs N] [--files N] [--depth N]
#       [--file-size SIZE] [--threads N] [--epochs N] [--duration D]
#       [--setup-timeout D] [--no-fuse] [--cluster DIR]
#
# Defaults: --dirs 100000 leaf directories, --files 1000000, --depth 5
# (fanout 10, 111,111 directories, 10 files each), --file-size 4KiB,
# --threads 8, --epochs 2, --duration 120s, --setup-timeout 12h. Building the
# default tree takes a long time on 2 cores; a quick run:
#   bench/dl-traversal.sh --dirs 64 --files 2000 --depth 3 --duration 20s
# `make bench-dl` runs it. Without /dev/fuse or fuse3 (`make deps`) the
# FUSE target is left out with a warning (--no-fuse leaves it out). Every
# process it starts is stopped on exit, also on failure or Ctrl-C; the work
# directory is removed after a success, the report is kept. --cluster DIR
# runs the cluster in DIR and keeps it: a later run with the same DIR
# restarts that cluster and finds the tree built so far, so an interrupted
# build resumes where it stopped.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
out=$REPO/bench-reports/dl-traversal-$(date -u +%Y%m%dT%H%M%SZ)
dirs=100000
files=1000000
depth=5
size=4KiB
threads=8
epochs=2
duration=120s
setup_timeout=12h
fuse=1
cluster=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --dirs) dirs=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --depth) depth=$2; shift 2 ;;
    --file-size) size=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --setup-timeout) setup_timeout=$2; shift 2 ;;
    --no-fuse) fuse=0; shift ;;
    --cluster) cluster=$2; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in dirs files depth threads epochs; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "error: --$v wants a positive integer, got '${!v}'" >&2; exit 2; }
done
(( epochs >= 2 )) || echo "warning: with --epochs 1 there is no epoch after a warm-up" >&2
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }

# The tree: fanout^depth leaf directories (at least --dirs) of
# files_per_dir files (at least --files in all).
fanout=1
leaves=1
while (( leaves < dirs )); do
  fanout=$((fanout + 1))
  leaves=1
  for ((i = 0; i < depth; i++)); do leaves=$((leaves * fanout)); done
done
per_dir=$(( (files + leaves - 1) / leaves ))
inner=0
n=1
for ((i = 0; i < depth; i++)); do inner=$((inner + n)); n=$((n * fanout)); done
tree="dl-tree-${fanout}x${depth}x${per_dir}-${size}"
echo "tree: fanout $fanout, depth $depth: $leaves leaf directories ($((leaves + inner)) directories in all), $per_dir files of $size each ($((leaves * per_dir)) files)"

WORK=$(mktemp -d /var/tmp/cairn-dl.XXXXXX)
DATA=${cluster:-$WORK/cluster}
MNT=$WORK/mnt
UP_PID=""
MOUNT_PID=""

# stop PID NAME: SIGTERM, up to 60 s, then SIGKILL.
stop() {
  local pid=$1 name=$2
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$name ($pid) still alive after 60 s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
}
cleanup() {
  local rc=$?
  set +e
  stop "$MOUNT_PID" "cairn mount"   # SIGTERM unmounts
  if mountpoint -q "$MNT" 2>/dev/null || ! stat "$MNT" >/dev/null 2>&1; then
    fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
  fi
  stop "$UP_PID" "cairn up"         # stops every node and master it started
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "starting cairn up on $DATA"
"$CAIRN" up --data-dir "$DATA" --mount "" >"$WORK/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 900); do
  grep -q "Cairn is up" "$WORK/up.log" && break
  kill -0 "$UP_PID" 2>/dev/null || { echo "error: cairn up exited:" >&2; cat "$WORK/up.log" >&2; exit 1; }
  sleep 0.1
done
grep -q "Cairn is up" "$WORK/up.log" || { echo "error: cairn up not up after 90 s:" >&2; tail -20 "$WORK/up.log" >&2; exit 1; }
export CAIRN_TLS_DIR="$DATA/tls/admin" # the identity the SDK targets connect with
master=$("$CAIRN" status --data-dir "$DATA" --json | sed -n 's/^ *"leader": *"\([^"]*\)".*/\1/p' | head -1)
[[ -n $master ]] || { echo "error: no master leader in cairn status --data-dir $DATA" >&2; exit 1; }
echo "cluster up, master $master"

targets=(--target "cairn-cached:$master/default" --target "cairn:$master/default")
if (( fuse )); then
  if [[ ! -e /dev/fuse ]]; then
    echo "warning: no /dev/fuse: the FUSE target is left out" >&2
    fuse=0
  else
    mkdir -p "$MNT"
    "$CAIRN" mount --data-dir "$DATA" -o entry_timeout=0,attr_timeout=0 default "$MNT" >"$WORK/mount.log" 2>&1 &
    MOUNT_PID=$!
    for _ in $(seq 1 300); do
      grep -q "mounted volume" "$WORK/mount.log" && break
      kill -0 "$MOUNT_PID" 2>/dev/null || break
      sleep 0.1
    done
    if grep -q "mounted volume" "$WORK/mount.log"; then
      echo "mounted volume default on $MNT with the kernel's caches off (entry_timeout=0,attr_timeout=0)"
      targets+=(--target "posix:$MNT" --meta-metrics "posix:$MNT=$master/default")
    else
      echo "warning: cairn mount failed (as a user it needs fuse3: make deps); the FUSE target is left out:" >&2
      tail -5 "$WORK/mount.log" >&2
      stop "$MOUNT_PID" "cairn mount"
      MOUNT_PID=""
      fuse=0
    fi
  fi
fi

shape=(--workload dl-traversal --set "fanout=$fanout" --set "depth=$depth" --set "files_per_dir=$per_dir"
  --set "file_size=$size" --set "tree=$tree" --threads "$threads" --setup-timeout "$setup_timeout")

# The tree, once, by the stateless client (it creates files about twice as
# fast as the inode client): a run whose setup builds it and whose one short
# epoch is not kept. The measured run finds it complete on every target.
echo "building the tree $tree with the stateless client (progress every 30 s)"
set +e
"$CAIRN" bench run "${shape[@]}" --set epochs=1 --set duration=1s --progress lines --progress-interval 30s \
  --target "cairn:$master/default" --out "$WORK/build" 2>&1 | tee "$WORK/build.log" | grep --line-buffered -E "setting up, |error|FAILURES"
brc=${PIPESTATUS[0]}
set -e
if (( brc != 0 )); then
  echo "error: building the tree failed (exit $brc):" >&2
  tail -20 "$WORK/build.log" >&2
  exit 1
fi

mkdir -p "$out"
echo "running cairn bench: dl-traversal, $threads threads, $epochs epoch(s) of at most $duration per target"
rc=0
"$CAIRN" bench run "${shape[@]}" --set "epochs=$epochs" --set "duration=$duration" \
  --progress lines --progress-interval 30s "${targets[@]}" --out "$out" || rc=$?
# Ctrl-C reaches the whole process group: cairn bench stops and writes its
# report, cairn up stops the cluster. Bash runs no INT trap when its child
# handled the signal, so tell from the cluster (given a moment to stop).
if (( rc != 0 )); then
  for _ in $(seq 1 30); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.1; done
fi
if ! kill -0 "$UP_PID" 2>/dev/null; then
  echo "cairn up has stopped (interrupted?); the partial report is in $out" >&2
  exit 130
fi

last=epoch-$epochs
echo
echo "=== dl-traversal, $last (earlier epochs warm up), read; ratios are to cairn-cached ==="
"$CAIRN" bench summary "$out" --phase "$last" --op read || rc=1
"$CAIRN" bench summary "$out" --phase "$last" --op read --tsv | awk -F'\t' '
  NR > 1 {
    kind = $4; sub(/:.*/, "", kind)
    if (kind == "posix") kind = "FUSE, kernel caches off"
    else if (kind == "cairn") kind = "cairn (stateless)"
    else if (kind == "cairn-cached") kind = "cairn-cached (warm cache)"
    printf "%-28s %10s files/s   meta nodes: %s metadata requests per open, %s namespace fetches per open%s\n",
      kind, $5, $9, $10, ($11 > 0 ? " (incomplete: see the notes in the report)" : "")
    if ($4 ~ /^cairn:/ && $7 != "-") ratio = $7
  }
  END { if (ratio != "") printf "throughput ratio stateless ÷ cached: %.2f\n", ratio }' || rc=1
echo "report: $out/report.json and $out/report.html"
exit $rc
