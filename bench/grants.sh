#!/usr/bin/env bash
# What extent grants cost: one fresh `cairn up`, read and written through
# two identities side by side. Its own mount and SDK use the admin identity,
# whose data-path requests need no grant; a second mount and SDK client use
# a `client` identity (`cairn client create`), whose reads and overwrites
# the data nodes serve only against the grants the meta nodes sign into
# their answers (docs/security.md). One `cairn bench run` per workload with
# the admin target first, so the report's "VS FIRST" column is
# client ÷ admin: the grants' price, everything else equal.
#
#   metadata     --threads 8, files=400 per thread (mdtest-like phases), mounts;
#   small-files  4 KiB files, write then read, mounts and SDK;
#   random-read  4 KiB reads at random offsets of a 64 MiB file per thread, SDK;
#   seq-read     2 files of 64 MiB, drop_cache, mounts.
#
#   bench/grants.sh [--out DIR] [--repetitions N] [--only NAME,...]
#
# --only runs the named runs alone (metadata, small-files-mount,
# small-files-sdk, random-read-sdk, seq-read).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
out=$REPO/bench-reports/grants-$(date -u +%Y%m%dT%H%M%SZ)
reps=3
only=
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    --only) only=,$2,; shift 2 ;;
    *) echo "usage: bench/grants.sh [--out DIR] [--repetitions N] [--only NAME,...]" >&2; exit 2 ;;
  esac
done
PEER=/bin/false
WORK=$(mktemp -d /var/tmp/cairn-grants.XXXXXX)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

pids=()
cleanup() {
  local rc=$? p
  set +e
  for p in "${pids[@]}"; do stop "$p" "cairn" 60; done
  unmount_left "$WORK/client-mnt"
  unmount_left "$WORK/up/mnt"
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "starting cairn up in $WORK/up"
"$CAIRN" up --data-dir "$WORK/up" >"$WORK/up.log" 2>&1 &
pids+=($!)
wait_log "$!" "$WORK/up.log" "^Data dir:" 120 "cairn up"
mountpoint -q "$WORK/up/mnt" || { echo "error: $WORK/up/mnt is not mounted" >&2; exit 1; }
master=$("$CAIRN" status --data-dir "$WORK/up" --json | python3 -c 'import json,sys; print(next(n["address"] for n in json.load(sys.stdin)["nodes"] if n["role"]=="master"))')
admin_tls=$WORK/up/tls/admin
"$CAIRN" client create bench --data-dir "$WORK/up" --out "$WORK/client-tls" >/dev/null
mkdir -p "$WORK/client-mnt"
"$CAIRN" mount --master "$master" --tls-dir "$WORK/client-tls" default "$WORK/client-mnt" >"$WORK/client-mount.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do mountpoint -q "$WORK/client-mnt" && break; sleep 0.2; done
mountpoint -q "$WORK/client-mnt" || { echo "error: the client identity's mount did not come up" >&2; cat "$WORK/client-mount.log" >&2; exit 1; }
# Each identity works in a directory of its own (the benchmark's trees
# must not meet); both are the volume's, so the client may reach them.
mkdir -p "$WORK/up/mnt/admin" "$WORK/up/mnt/client"
chmod 0777 "$WORK/up/mnt/client"

mounts=(--target "posix:$WORK/up/mnt/admin" --target "posix:$WORK/client-mnt/client")
sdks=(--target "cairn:$master/default?tls=$admin_tls" --target "cairn:$master/default?tls=$WORK/client-tls")
mkdir -p "$out"
run() {
  local name=$1; shift
  [[ -z $only || $only == *",$name,"* ]] || return 0
  echo "== $name"
  "$CAIRN" bench run --repetitions "$reps" --progress lines --progress-interval 60s --out "$out/$name" "$@" |
    tee "$out/$name.txt"
}
run metadata "${mounts[@]}" --workload metadata --set files=400 --threads 8
run small-files-mount "${mounts[@]}" --workload small-files --set sizes=4KiB --set files=500 --threads 8
run small-files-sdk "${sdks[@]}" --workload small-files --set sizes=4KiB --set files=500 --threads 8
run random-read-sdk "${sdks[@]}" --workload random-read --set files=1 --set file_size=64MiB --set block_size=4KiB --set ops=5000 --threads 4
run seq-read "${mounts[@]}" --workload seq-read --set file_size=64MiB --set files=2 --set drop_cache=true --threads 4
echo
echo "reports in $out (VS FIRST = client identity ÷ admin identity)"
