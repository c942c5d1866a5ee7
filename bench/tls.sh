#!/usr/bin/env bash
# What TLS costs: two fresh `cairn up` clusters side by side on this machine,
# one as `cairn up` runs by default (mutual TLS on every connection; the
# data path authenticated, frames outside TLS) and one with --insecure (plain
# text everywhere), each with its FUSE mount. One `cairn bench run` per
# workload with the plain cluster first, so the report's "VS FIRST" column
# is TLS ÷ plain:
#
#   metadata   --threads 8, files=400 per thread (mdtest-like phases);
#   seq-write  --threads 4, 2 files of 64 MiB each, 1 MiB blocks;
#   seq-read   the same files' kind, drop_cache (reads reach the cluster).
#
# Both clusters stay up for the whole run, so each target runs while the
# other cluster idles.
#
#   bench/tls.sh [--out DIR] [--repetitions N]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
out=$REPO/bench-reports/tls-$(date -u +%Y%m%dT%H%M%SZ)
reps=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    *) echo "usage: bench/tls.sh [--out DIR] [--repetitions N]" >&2; exit 2 ;;
  esac
done
PEER=/bin/false
# The clusters' data (a few GiB) goes when the run succeeds; the reports
# stay in --out.
WORK=$(mktemp -d /var/tmp/cairn-tls.XXXXXX)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

pids=()
cleanup() {
  local rc=$? p
  set +e
  for p in "${pids[@]}"; do stop "$p" "cairn up" 60; done
  unmount_left "$WORK/plain/mnt"
  unmount_left "$WORK/tls/mnt"
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# up NAME ARGS...: a fresh cairn up in WORK/NAME with its mount, waited for.
up() {
  local name=$1; shift
  echo "starting cairn up $* in $WORK/$name"
  "$CAIRN" up --data-dir "$WORK/$name" "$@" >"$WORK/$name.log" 2>&1 &
  pids+=($!)
  wait_log "$!" "$WORK/$name.log" "^Data dir:" 120 "cairn up ($name)"
  mountpoint -q "$WORK/$name/mnt" || { echo "error: $WORK/$name/mnt is not mounted" >&2; exit 1; }
}
up plain --insecure
up tls

targets=(--target "posix:$WORK/plain/mnt" --target "posix:$WORK/tls/mnt")
mkdir -p "$out"
run() {
  local name=$1; shift
  echo "== $name"
  "$CAIRN" bench run "${targets[@]}" --repetitions "$reps" --progress lines --progress-interval 60s --out "$out/$name" "$@" |
    tee "$out/$name.txt"
}
run metadata --workload metadata --set files=400 --threads 8
run seq-write --workload seq-write --set file_size=64MiB --set files=2 --threads 4
run seq-read --workload seq-read --set file_size=64MiB --set files=2 --set drop_cache=true --threads 4
echo
echo "reports in $out (VS FIRST = TLS ÷ plain text)"
