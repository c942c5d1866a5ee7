#!/usr/bin/env bash
# VarFS's setup on one machine: the servers in one network namespace, the
# client in another, joined by a veth link shaped to 10 MB/s each way with
# tc. One cluster (1 master, 3 meta, 3 data nodes, all listening on the
# servers' veth address) holds two volumes, one with the default extent
# layout and one with content-defined chunks (--layout cdc). One `cairn
# bench run` inside the client's namespace drives both through the SDK
# (`cairn:` targets) with the `insert` workload: insert bytes in the middle
# of a large file the way a POSIX program must (move the tail up block by
# block, write the new bytes, close). Targets are interleaved; the extent
# volume is the first, so the reports' ratios read "cdc / extent". Before
# the link is shaped, a first run compares sequential writes of the same
# size (`seq-write`, fsync at the end): the initial-write cost of chunking.
# Reports: DIR/seq-write and DIR/insert.
#
#   bench/cdc-slow-link.sh [--out DIR] [--size SIZE] [--ops N] [--rate RATE] [--repetitions N]
#
# Defaults: --size 256MiB --ops 3 --rate 80mbit (10 MB/s) --repetitions 1.
# Needs root (ip netns, tc). `make bench-cdc` runs it. Everything it made
# (processes, namespaces, temp dirs) is removed on exit, also on failure;
# the report is kept.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
out=$REPO/bench-reports/cdc-slow-link-$(date -u +%Y%m%dT%H%M%SZ)
size=256MiB
ops=3
rate=80mbit
reps=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "error: needs root for ip netns and tc" >&2; exit 2; }
command -v tc >/dev/null || { echo "error: tc not found (apt-get install iproute2)" >&2; exit 2; }

id=$$
NS_S=cairn-srv-$id
NS_C=cairn-cli-$id
VS=cvs$id
VC=cvc$id
SRV=10.213.78.1
CLI=10.213.78.2
WORK=$(mktemp -d /var/tmp/cairn-cdc.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  set +e
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # Whatever still runs in the namespaces (deleting a namespace does not
  # stop its processes).
  for ns in "$NS_S" "$NS_C"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
  done
  ip netns del "$NS_S" 2>/dev/null
  ip netns del "$NS_C" 2>/dev/null
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "namespaces $NS_S ($SRV) and $NS_C ($CLI), link shaped to $rate each way"
ip netns add "$NS_S"
ip netns add "$NS_C"
ip -n "$NS_S" link add "$VS" type veth peer name "$VC" netns "$NS_C"
ip -n "$NS_S" addr add "$SRV/24" dev "$VS"
ip -n "$NS_C" addr add "$CLI/24" dev "$VC"
for x in "$NS_S $VS" "$NS_C $VC" "$NS_S lo" "$NS_C lo"; do
  set -- $x
  ip -n "$1" link set "$2" up
done

in_srv() { ip netns exec "$NS_S" "$@"; }
# A cluster of its own: a CA, one identity for the server's processes (named
# by the server's address) and an admin identity for the commands and the
# benchmark.
"$CAIRN" cert ca --dir "$WORK/ca" >/dev/null
"$CAIRN" cert issue --ca "$WORK/ca" --kind node --name server --host "$SRV" --out "$WORK/tls-node" >/dev/null
"$CAIRN" cert issue --ca "$WORK/ca" --kind admin --name bench --out "$WORK/tls-admin" >/dev/null
export CAIRN_TLS_DIR="$WORK/tls-admin"
role() {
  local name=$1; shift
  mkdir -p "$WORK/$name"
  # Not through in_srv: $! must be the process itself (ip netns exec
  # execs it), not a subshell around it, or the cleanup would miss it.
  ip netns exec "$NS_S" "$CAIRN" "$@" --data-dir "$WORK/$name" --tls-dir "$WORK/tls-node" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
}
role master master --peers "1=$SRV:17000" --listen "$SRV:17000" --metrics-addr "127.0.0.1:17001"
for i in 1 2 3; do
  role "meta-$i" meta --master "$SRV:17000" --listen "$SRV:171${i}0" --metrics-addr "127.0.0.1:171${i}1"
  role "data-$i" data --master "$SRV:17000" --listen "$SRV:172${i}0" --data-listen "$SRV:172${i}2" --metrics-addr "127.0.0.1:172${i}1"
done
echo "waiting for the cluster"
for _ in $(seq 1 300); do
  n=$(in_srv "$CAIRN" status --master "$SRV:17000" --json 2>/dev/null | python3 -c 'import json,sys
try:
    print(sum(1 for n in json.load(sys.stdin)["nodes"] if n["role"] != "master" and n["state"] == "alive"))
except Exception:
    print(0)')
  [[ $n == 6 ]] && break
  sleep 0.2
done
[[ $n == 6 ]] || { echo "error: cluster not up; logs in $WORK" >&2; exit 1; }
in_srv "$CAIRN" volume create ext --master "$SRV:17000"
in_srv "$CAIRN" volume create cdc --layout cdc --master "$SRV:17000"

bench() {
  local name=$1 yaml=$2
  mkdir -p "$out/$name"
  printf '%s\n' "$yaml" >"$out/$name/workloads.yaml"
  ip netns exec "$NS_C" "$CAIRN" bench run -f "$out/$name/workloads.yaml" --progress lines --progress-interval 30s \
    --target "cairn:$SRV:17000/ext" --target "cairn:$SRV:17000/cdc" --out "$out/$name"
}
echo "sequential writes, link not shaped"
bench seq-write "# cdc-slow-link: initial sequential write, extent vs cdc layout
repetitions: $reps
defaults:
  threads: 1
workloads:
  - kind: seq-write
    files: 1
    file_size: $size
    block_size: 1MiB
    fsync: true"

# tbf on each end's egress: the client's uploads and its downloads both
# cross one shaped hop, as in VarFS's evaluation.
tc -n "$NS_S" qdisc add dev "$VS" root tbf rate "$rate" burst 64kb latency 200ms
tc -n "$NS_C" qdisc add dev "$VC" root tbf rate "$rate" burst 64kb latency 200ms
echo "inserts, link shaped to $rate"
bench insert "# cdc-slow-link: 4 KiB inserts in a large file over a shaped link, extent vs cdc layout
repetitions: $reps
defaults:
  threads: 1
workloads:
  - kind: insert
    files: 1
    file_size: $size
    block_size: 1MiB
    ops: $ops
    insert_size: 4KiB
    phases: [insert]"
echo "reports in $out/seq-write and $out/insert (ratios: cdc / extent)"
