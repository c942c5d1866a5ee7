#!/usr/bin/env bash
# Benchmark a `cairn up` mount against a FUSE passthrough of the local disk
# (../shared/peers/passthrough, the "FUSE ceiling") in one `cairn bench run`:
# sequential read and write bandwidth, 4 KiB random read and write IOPS and
# file creates per second. The passthrough is the first target, so every ratio
# in the report reads "Cairn / passthrough".
#
#   bench/mount-vs-passthrough.sh [--out DIR] [--size SIZE] [--files N] [--repetitions N] [--threads N]
#
# Defaults are modest (a run takes a few minutes on 2 cores): --size 64MiB per
# file for the sequential and random workloads, --files 1000 creates per
# thread, --repetitions 3, --threads 1. `make bench-mount` runs it. Everything
# it starts (cairn up, the passthrough daemon) is stopped on exit, also on
# failure or Ctrl-C; temporary directories are removed, the report is kept.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
PEERS=${PASSTHROUGH_DIR:-$(cd "$REPO/.." && pwd)/shared/peers/passthrough}
out=$REPO/bench-reports/mount-vs-passthrough-$(date -u +%Y%m%dT%H%M%SZ)
size=64MiB
files=1000
reps=3
threads=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }
[[ -x $PEERS/start.sh && -x $PEERS/stop.sh ]] || { echo "error: no passthrough scripts in $PEERS (set PASSTHROUGH_DIR)" >&2; exit 2; }
[[ -e /dev/fuse ]] || { echo "error: no /dev/fuse" >&2; exit 2; }

# Both file systems live on the same local disk, under one work directory.
WORK=$(mktemp -d /var/tmp/cairn-mvp.XXXXXX)
DATA=$WORK/cairn
CMNT=$DATA/mnt
PSRC=$WORK/passthrough-src
PMNT=$WORK/passthrough-mnt
export STATE=$WORK/passthrough-state   # the passthrough's own pid file and log
UP_PID=""
PT_STARTED=0

cleanup() {
  local rc=$?
  set +e
  if (( PT_STARTED )); then "$PEERS/stop.sh" "$PMNT"; fi
  if [[ -n $UP_PID ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID"
    for _ in $(seq 1 600); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$UP_PID" 2>/dev/null && { echo "cairn up still alive after 60 s: SIGKILL" >&2; kill -KILL "$UP_PID"; }
    wait "$UP_PID" 2>/dev/null
  fi
  for m in "$CMNT" "$PMNT"; do
    if mountpoint -q "$m" 2>/dev/null || ! stat "$m" >/dev/null 2>&1; then umount -l "$m" 2>/dev/null; fi
  done
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "starting cairn up on $DATA"
"$CAIRN" up --data-dir "$DATA" >"$WORK/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 900); do
  grep -q "Cairn is up" "$WORK/up.log" && break
  kill -0 "$UP_PID" 2>/dev/null || { echo "error: cairn up exited:" >&2; cat "$WORK/up.log" >&2; exit 1; }
  sleep 0.1
done
mountpoint -q "$CMNT" || { echo "error: cairn up did not mount $CMNT" >&2; tail -30 "$WORK/up.log" >&2; exit 1; }

PT_STARTED=1
"$PEERS/start.sh" "$PSRC" "$PMNT"

cat >"$WORK/workloads.yaml" <<YAML
# mount-vs-passthrough: bandwidth, 4 KiB IOPS and creates/s
repetitions: $reps
defaults:
  threads: $threads
  duration: 60s
workloads:
  - kind: seq-write
    name: seq-write-1MiB
    files: 2
    file_size: $size
    block_size: 1MiB
    fsync: true
  - kind: seq-read
    name: seq-read-1MiB
    files: 2
    file_size: $size
    block_size: 1MiB
    drop_cache: true
  - kind: random-read
    name: random-read-4KiB
    files: 2
    file_size: $size
    block_size: 4KiB
    ops: 4000
    drop_cache: true
  - kind: random-write
    name: random-write-4KiB
    files: 2
    file_size: $size
    block_size: 4KiB
    ops: 4000
    fsync: true
  - kind: metadata
    name: creates
    files: $files
    phases: [FileCreation, FileRemoval]
YAML

mkdir -p "$out"
cp "$WORK/workloads.yaml" "$out/workloads.yaml"
echo "running cairn bench: passthrough ($PMNT) first, then Cairn ($CMNT)"
"$CAIRN" bench run -f "$WORK/workloads.yaml" --progress lines --progress-interval 30s \
  --target "posix:$PMNT" --target "posix:$CMNT" --out "$out"
echo
echo "report: $out/report.json and $out/report.html (ratios are Cairn / passthrough)"
