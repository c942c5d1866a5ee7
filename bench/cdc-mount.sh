#!/usr/bin/env bash
# Sequential writes through the FUSE mount, extent vs chunked layout, same
# run: one `cairn up` cluster (volume `default`, extent layout, mounted by
# cairn up) plus a volume `cdc` (--layout cdc) mounted with `cairn mount`;
# one `cairn bench run` writes files of unique bytes (fsync at the end) to
# both mounts, targets interleaved. The extent mount is the first target,
# so the ratios read "cdc / extent".
#
#   bench/cdc-mount.sh [--out DIR] [--size SIZE] [--repetitions N]
#
# Defaults: --size 256MiB --repetitions 5. `make bench-cdc` runs it after
# bench/cdc-slow-link.sh. Everything it started is stopped on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
out=$REPO/bench-reports/cdc-mount-$(date -u +%Y%m%dT%H%M%SZ)
size=256MiB
reps=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }

WORK=$(mktemp -d /var/tmp/cairn-cdcmount.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  set +e
  # The mount first (SIGTERM unmounts), then the cluster.
  for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
    pid=${PIDS[$i]}
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for mp in "$WORK/cdc" "$WORK/c/mnt"; do
    mountpoint -q "$mp" 2>/dev/null && umount -l "$mp"
  done
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$CAIRN" up --data-dir "$WORK/c" >"$WORK/up.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 900); do
  grep -q "Cairn is up" "$WORK/up.log" && break
  kill -0 "${PIDS[0]}" 2>/dev/null || { echo "error: cairn up exited:" >&2; cat "$WORK/up.log" >&2; exit 1; }
  sleep 0.1
done
grep -q "Cairn is up" "$WORK/up.log" || { echo "error: cairn up not up after 90 s" >&2; exit 1; }
"$CAIRN" volume create cdc --layout cdc --data-dir "$WORK/c"
mkdir -p "$WORK/cdc"
"$CAIRN" mount --data-dir "$WORK/c" cdc "$WORK/cdc" >"$WORK/mount.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 300); do
  grep -q "mounted volume" "$WORK/mount.log" && break
  sleep 0.1
done
grep -q "mounted volume" "$WORK/mount.log" || { echo "error: cairn mount did not mount:" >&2; cat "$WORK/mount.log" >&2; exit 1; }

mkdir -p "$out"
"$CAIRN" bench run --workload seq-write --set "file_size=$size" --set files=1 --set fsync=true \
  --repetitions "$reps" --progress lines --progress-interval 30s \
  --target "posix:$WORK/c/mnt" --target "posix:$WORK/cdc" --out "$out"
echo "report in $out (ratios: cdc / extent, through the mount)"
