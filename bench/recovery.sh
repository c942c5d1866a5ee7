#!/usr/bin/env bash
# Recovery after a data node dies: the write pause and the re-replication rate.
#
#   bench/recovery.sh [--mib N] [--out-after D] [--keep]
#
# Starts `cairn up --datas 4 --out-after D` (default 10s) in a temporary
# directory, writes N MiB (default 1024) through the mount in 64 MiB files
# (dd conv=fsync), then kills -9 the data node that heads the most data
# partitions while a writer keeps writing 1 MiB files with fsync. It prints:
#
#   - the write pause: the longest 1 MiB write+fsync after the kill (the
#     time until the master marks the node down and writers reroute);
#   - the re-replication: bytes the surviving data nodes copied
#     (cairn_data_aligned_bytes_total), from the first replica move until
#     every partition is healthy again on the remaining nodes, and the rate;
#   - a SHA-256 check of every file written.
#
# The cluster is stopped and its directory removed at the end (--keep keeps
# it). `make bench-recovery` runs it. Not part of CI.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
mib=1024
out_after=10s
keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --mib) mib=$2; shift 2 ;;
    --out-after) out_after=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $mib =~ ^[1-9][0-9]*$ ]] || { echo "error: --mib wants a positive integer, got '$mib'" >&2; exit 2; }
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "error: python3 is needed to read cairn status --json" >&2; exit 2; }

WORK=$(mktemp -d /var/tmp/cairn-recovery.XXXXXX)
DATA=$WORK/cluster
MNT=$DATA/mnt
UP_PID=""
WRITER_PID=""
cleanup() {
  local rc=$?
  set +e
  [[ -n $WRITER_PID ]] && kill "$WRITER_PID" 2>/dev/null
  if [[ -n $UP_PID ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID"
    for _ in $(seq 1 600); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$UP_PID" 2>/dev/null
    wait "$UP_PID" 2>/dev/null
  fi
  if (( keep || rc != 0 )); then echo "kept $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT INT TERM

status_json() { "$CAIRN" status --data-dir "$DATA" --json; }

echo "starting cairn up --datas 4 --out-after $out_after in $DATA"
"$CAIRN" up --data-dir "$DATA" --datas 4 --out-after "$out_after" >"$WORK/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 1 600); do grep -q "Cairn is up" "$WORK/up.log" && break; sleep 0.1; done
grep -q "Cairn is up" "$WORK/up.log" || { cat "$WORK/up.log"; echo "error: cairn up did not come up" >&2; exit 1; }

echo "writing $mib MiB through the mount"
mkdir -p "$MNT/data" "$WORK/sums"
files=$(( (mib + 63) / 64 ))
for i in $(seq 1 "$files"); do
  head -c $((64 << 20)) /dev/urandom | tee >(sha256sum | cut -d' ' -f1 >"$WORK/sums/f$i") \
    | dd of="$MNT/data/f$i" bs=1M conv=fsync status=none
done
sleep 3 # the partitions' usage reaches the master

read -r victim pid < <(status_json | python3 -c '
import json, sys, collections
s = json.load(sys.stdin)
heads = collections.Counter(p["replicas"][0] for p in s["partitions"] if p["kind"] == "data")
v = heads.most_common(1)[0][0]
print(v, [n["pid"] for n in s["nodes"] if n["id"] == v and n["role"] == "data"][0])')
metrics=$(status_json | python3 -c "
import json, sys
s = json.load(sys.stdin)
print(' '.join(n['metrics_address'] for n in s['nodes'] if n['role'] == 'data' and n['id'] != $victim))")
aligned() {
  local sum=0 a v
  for a in $metrics; do
    v=$(curl -s "http://$a/metrics" | awk '/^cairn_data_aligned_bytes_total /{printf "%d", $2}')
    sum=$((sum + ${v:-0}))
  done
  echo $sum
}

# A writer of 1 MiB files with fsync, one line per file: seconds it took.
( i=0; while true; do i=$((i + 1))
    s=$(date +%s.%N)
    head -c $((1 << 20)) /dev/urandom | tee >(sha256sum | cut -d' ' -f1 >"$WORK/sums/w$i") \
      | dd of="$MNT/data/w$i" bs=1M conv=fsync status=none 2>>"$WORK/writer.err" || echo "FAIL w$i" >>"$WORK/writer.err"
    e=$(date +%s.%N); echo "$s $e" >>"$WORK/writer.log"
  done ) &
WRITER_PID=$!
sleep 2
before=$(aligned)
killed=$(date +%s.%N)
echo "kill -9 data node $victim (pid $pid), which heads the most data partitions"
kill -9 "$pid"

moving_at=""
while true; do
  sleep 0.5
  st=$(status_json)
  nodes=$("$CAIRN" node list --data-dir "$DATA" --json)
  state=$(python3 -c "
import json, sys
s, nodes = json.loads(sys.argv[1]), json.loads(sys.argv[2])
victim = $victim
parts = s['partitions']
moving = any(n['joining'] > 0 for n in nodes) or any(p['health'] == 'recovering' for p in parts)
done = all(p['health'] == 'healthy' for p in parts) and all(victim not in p['replicas'] for p in parts)
print('done' if done else 'moving' if moving else 'wait')" "$st" "$nodes")
  now=$(date +%s.%N)
  if [[ $state == moving && -z $moving_at ]]; then moving_at=$now; fi
  ticks=$((${ticks:-0} + 1))
  if (( ticks % 4 == 0 )); then # progress, as cairn status shows it
    line=$("$CAIRN" status --data-dir "$DATA" | grep '^recovery:' || true)
    [[ -n $line ]] && printf '%6.1f s  %s\n' "$(python3 -c "print(float('$now') - float('$killed'))")" "$line"
  fi
  [[ $state == done ]] && break
  if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) - float(sys.argv[2]) > 900 else 1)" "$now" "$killed"; then
    echo "error: not recovered 15 minutes after the kill" >&2; exit 1
  fi
done
healed=$(date +%s.%N)
after=$(aligned)
kill "$WRITER_PID" 2>/dev/null; wait "$WRITER_PID" 2>/dev/null || true; WRITER_PID=""

pause=$(awk -v k="$killed" '$2 > k { d = $2 - $1; if (d > m) m = d } END { printf "%.2f", m }' "$WORK/writer.log")
failed=$(grep -c FAIL "$WORK/writer.err" 2>/dev/null || true)
bad=0
for f in "$WORK"/sums/*; do
  n=$(basename "$f")
  [[ -e $MNT/data/$n ]] || continue
  [[ $(sha256sum "$MNT/data/$n" | cut -d' ' -f1) == "$(cat "$f")" ]] || bad=$((bad + 1))
done
python3 - "$killed" "${moving_at:-$killed}" "$healed" "$before" "$after" "$pause" "${failed:-0}" "$bad" "$mib" <<'EOF'
import sys
killed, moving, healed, before, after = map(float, sys.argv[1:6])
pause, failed, bad, mib = sys.argv[6], sys.argv[7], sys.argv[8], sys.argv[9]
copied = (after - before) / (1 << 20)
took = healed - moving
print(f"data written before the kill: {mib} MiB")
print(f"write pause after the kill (longest 1 MiB write+fsync): {pause} s; failed writes: {failed}")
print(f"re-replication: {copied:.0f} MiB copied in {took:.1f} s after the first move = {copied / max(took, 1e-9):.1f} MiB/s "
      f"(healthy {healed - killed:.1f} s after the kill, of which the out delay)")
print(f"files checked: {bad} mismatches")
sys.exit(1 if int(bad) else 0)
EOF
