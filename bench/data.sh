#!/usr/bin/env bash
# Data path side by side: Cairn against JuiceFS and the FUSE ceiling. One
# `cairn bench run` of several data workloads (a workload file written by
# this script) on four targets, in this order:
#
#   1. posix:/mnt/peers/passthrough  the go-fuse loopback of the local disk
#                                    (the FUSE ceiling; first target, so the
#                                    report's own ratios are "÷ passthrough");
#   2. posix:/mnt/peers/juicefs      JuiceFS on Redis with a local-directory bucket;
#   3. posix:DIR/mnt                 a fresh `cairn up` cluster's FUSE mount
#                                    (1 master, 3 meta and 3 data nodes, 3
#                                    replicas on this one disk; --meta-metrics);
#   4. posix:WORK/mnt-r1             the same cluster's volume r1 with ONE
#                                    replica (`cairn volume create r1
#                                    --replicas 1`), mounted by a `cairn mount`
#                                    this script starts (--meta-metrics): what
#                                    the data path costs without replication.
#
# The workloads (each phase also bounded by the workloads' duration):
#
#   small-files         sizes 4KiB,128KiB, --threads 8, --files 256 per thread and size;
#   small-files-fsync   the same with an fsync before every close: on the
#                       passthrough, one copy through FUSE synced file by file,
#                       with no metadata service and no network, a reference
#                       for a file system whose data is durable at close
#                       (Cairn's is either way; JuiceFS's fsync does not reach
#                       the disk);
#   seq-write           --seq-files 2 files of --seq-size 256MiB, 1 MiB blocks, fsync, 1 thread;
#   seq-read            the same, drop_cache (every file written in setup, then evicted);
#   random-read-direct  4 KiB blocks, O_DIRECT, --random-threads 4, each with
#                       --random-files 2 files of --random-size 64MiB, --random-ops 25000;
#   random-read-buffered    the same through the page cache (drop_cache after setup);
#   random-write-direct     4 KiB blocks, O_DIRECT, fsync at the end, same files;
#   random-write-buffered   the same through the page cache, fsync at the end;
#   seq-read-large      one file of --large-size 512MiB read once from start to
#                       end, 1 MiB blocks, drop_cache (a checkpoint, a video);
#   random-read-shared-direct  4 KiB blocks, O_DIRECT, --random-threads 4 all
#                       reading ONE shared file of --large-size, --random-ops
#                       each (a database or a model's weights).
#
# Then it prints one compact table: per workload, phase and operation the
# ops/s and MiB/s of every target (median over the repetitions) and the
# ratios Cairn ÷ JuiceFS and Cairn ÷ passthrough of the 3-replica mount and
# Cairn r1 ÷ JuiceFS of the 1-replica one (of MiB/s when data moves, else of
# ops/s), the sequential write against what three replicas on this one disk
# allow (Cairn ÷ (passthrough ÷ 3)) and of one replica against JuiceFS, and
# the small-file writes of one durable copy (the passthrough with fsync)
# against JuiceFS, the host's CPU per operation of every write phase, and
# the peak RSS (VmHWM) of the Cairn mount process (the `cairn mount` child of
# `cairn up`), of the r1 mount process and of each data node process (which
# serve both volumes), read just before the mounts and the cluster are stopped.
#
#   bench/data.sh [--out DIR] [--repetitions N] [--duration D]
#       [--threads N] [--files N] [--sizes LIST] [--seq-size SIZE] [--seq-files N]
#       [--random-threads N] [--random-files N] [--random-size SIZE]
#       [--random-ops N] [--large-size SIZE] [--setup-timeout D]
#
# Defaults as above, --repetitions 3 and the workloads' 60s bound per phase
# (--duration). The environment can set the same: BENCH_DATA_REPETITIONS,
# BENCH_DATA_THREADS, BENCH_DATA_FILES, BENCH_DATA_SEQ_SIZE,
# BENCH_DATA_RANDOM_SIZE, BENCH_DATA_RANDOM_OPS, BENCH_DATA_LARGE_SIZE (flags win). `make bench-data`
# runs it (flags through BENCH_DATA_FLAGS). The report goes to DIR
# (default bench-reports/data-TIMESTAMP): report.json, report.html, the
# workload file workloads.yaml, the peak RSS in peak-rss.txt and the table
# in summary.txt.
#
# A peer that is already mounted is used and left running; a peer this script
# starts (bench/peers/peer.sh) is stopped on exit, as are the r1 mount (SIGTERM,
# SIGKILL after 20 s, then a lazy unmount if still mounted) and then the
# cluster, also on failure or Ctrl-C. The work directory is removed after a
# success and kept with the logs after a failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
PEER=$HERE/peers/peer.sh
out=$REPO/bench-reports/data-$(date -u +%Y%m%dT%H%M%SZ)
reps=${BENCH_DATA_REPETITIONS:-3}
threads=${BENCH_DATA_THREADS:-8}
files=${BENCH_DATA_FILES:-256}
sizes=4KiB,128KiB
seq_size=${BENCH_DATA_SEQ_SIZE:-256MiB}
seq_files=2
random_threads=4
random_files=2
random_size=${BENCH_DATA_RANDOM_SIZE:-64MiB}
random_ops=${BENCH_DATA_RANDOM_OPS:-25000}
large_size=${BENCH_DATA_LARGE_SIZE:-512MiB}
duration=""
setup_timeout=30m
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --seq-size) seq_size=$2; shift 2 ;;
    --seq-files) seq_files=$2; shift 2 ;;
    --random-threads) random_threads=$2; shift 2 ;;
    --random-files) random_files=$2; shift 2 ;;
    --random-size) random_size=$2; shift 2 ;;
    --random-ops) random_ops=$2; shift 2 ;;
    --large-size) large_size=$2; shift 2 ;;
    --setup-timeout) setup_timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;p}' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in reps threads files seq_files random_threads random_files random_ops; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "error: --${v//_/-} wants a positive integer, got '${!v}'" >&2; exit 2; }
done
# Sizes and the duration go into a YAML file: keep them to plain tokens
# (`cairn bench run` checks their values and says what is wrong).
for v in sizes seq_size random_size large_size duration setup_timeout; do
  [[ ${!v} =~ ^[0-9A-Za-z.,]*$ ]] || { echo "error: --${v//_/-} '${!v}' is not a size, list of sizes or duration" >&2; exit 2; }
done
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }
[[ -x $PEER ]] || { echo "error: $PEER missing" >&2; exit 2; }
[[ -e /dev/fuse ]] || { echo "error: no /dev/fuse: the FUSE targets cannot be mounted" >&2; exit 2; }
command -v python3 >/dev/null || { echo "error: python3 is needed to read report.json" >&2; exit 2; }

WORK=$(mktemp -d /var/tmp/cairn-data.XXXXXX)
DATA=$WORK/cluster
MNT=$DATA/mnt
MNT1=$WORK/mnt-r1   # volume r1 (one replica), mounted by this script
UP_PID=""
R1_PID=""
started=()     # peers this script started (and stops)
peer_mnts=()   # every peer mount used

# stop, unmount_left, start_peers, stop_peers, wait_log, start_up, mount_r1
. "$HERE/lib.sh"
cleanup() {
  local rc=$?
  set +e
  # The r1 mount first: it is a client of the cluster.
  stop "$R1_PID" "cairn mount r1" 20   # SIGTERM unmounts MNT1
  unmount_left "$MNT1"
  stop "$UP_PID" "cairn up"   # stops every node and master and unmounts DIR/mnt
  unmount_left "$MNT"
  stop_peers
  if (( rc == 0 )); then rm -rf "$WORK"; else echo "logs kept in $WORK" >&2; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The peers: passthrough (the ceiling, first target), then JuiceFS.
start_peers passthrough juicefs

start_up "$DATA" "$MNT"

# Volume r1: one replica of every partition, mounted by this script.
mount_r1 "$DATA" "$MNT1"

mkdir -p "$out"
# The workload file: per-workload keys (threads, direct, names) cannot go
# through --set, which applies to every workload that has the key.
{
  echo "# written by bench/data.sh"
  if [[ -n $duration ]]; then
    echo "defaults:"
    echo "  duration: $duration"
  fi
  echo "workloads:"
  echo "  - {kind: small-files, sizes: \"$sizes\", files: $files, threads: $threads}"
  echo "  - {kind: small-files, name: small-files-fsync, sizes: \"$sizes\", files: $files, fsync: true, threads: $threads}"
  echo "  - {kind: seq-write, files: $seq_files, file_size: $seq_size, block_size: 1MiB, fsync: true, threads: 1}"
  echo "  - {kind: seq-read, files: $seq_files, file_size: $seq_size, block_size: 1MiB, drop_cache: true, threads: 1}"
  for kind in read write; do
    for mode in direct buffered; do
      d=false; [[ $mode == direct ]] && d=true
      if [[ $kind == read ]]; then extra="drop_cache: true"; else extra="fsync: true"; fi
      echo "  - {kind: random-$kind, name: random-$kind-$mode, direct: $d, $extra, files: $random_files, file_size: $random_size, block_size: 4KiB, ops: $random_ops, threads: $random_threads}"
    done
  done
  echo "  - {kind: seq-read, name: seq-read-large, files: 1, file_size: $large_size, block_size: 1MiB, drop_cache: true, threads: 1}"
  echo "  - {kind: random-read, name: random-read-shared-direct, shared: true, direct: true, drop_cache: true, files: 1, file_size: $large_size, block_size: 4KiB, ops: $random_ops, threads: $random_threads}"
} >"$out/workloads.yaml"

targets=(--target "posix:${peer_mnts[0]}" --target "posix:${peer_mnts[1]}" --target "posix:$MNT"
  --target "posix:$MNT1"
  --meta-metrics "posix:$MNT=$master/default" --meta-metrics "posix:$MNT1=$master/r1")
rc=0

echo
echo "=== data path: $out/workloads.yaml, $reps repetition(s) ==="
sed -n '2,$p' "$out/workloads.yaml"
r=0
"$CAIRN" bench run -f "$out/workloads.yaml" --repetitions "$reps" --setup-timeout "$setup_timeout" \
  --progress lines --progress-interval 30s "${targets[@]}" --out "$out" || r=$?
if (( r != 0 )); then
  for _ in $(seq 1 30); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$UP_PID" 2>/dev/null || { echo "cairn up has stopped (interrupted?); partial report in $out" >&2; exit 130; }
  (( r == 2 )) && { echo "error: cairn bench run refused its arguments" >&2; exit 2; }
  echo "warning: cairn bench run exited $r; its report holds what was measured" >&2
  rc=1
fi

# Peak RSS, just before the mounts and the cluster stop: VmHWM of the
# children of cairn up that are the mount (`cairn mount`, which serves the
# FUSE mount; cairn up itself does not) and the data nodes (`cairn data`), and
# of this script's r1 mount (r1-mount). One line each: NAME PID KIB.
: >"$out/peak-rss.txt"
hwm=$(awk '$1 == "VmHWM:" {print $2}' "/proc/$R1_PID/status" 2>/dev/null || true)
[[ -n $hwm ]] && echo "r1-mount $R1_PID $hwm" >>"$out/peak-rss.txt"
for pid in $(pgrep -P "$UP_PID" || true); do
  mapfile -d '' -t argv <"/proc/$pid/cmdline" 2>/dev/null || continue
  name=""
  case "${argv[1]:-}" in
    mount) name=mount ;;
    data)
      for ((i = 2; i + 1 < ${#argv[@]}; i++)); do
        [[ ${argv[i]} == --data-dir ]] && name=$(basename "${argv[i + 1]}")
      done
      [[ -n $name ]] || name=data-pid$pid ;;
  esac
  [[ -n $name ]] || continue
  hwm=$(awk '$1 == "VmHWM:" {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [[ -n $hwm ]] && echo "$name $pid $hwm" >>"$out/peak-rss.txt"
done
sort -o "$out/peak-rss.txt" "$out/peak-rss.txt"

echo
BENCH_DIR="$HERE" PYTHONDONTWRITEBYTECODE=1 python3 - "$out/report.json" "$out/peak-rss.txt" <<'PY' | tee "$out/summary.txt" || rc=1
import json, os, sys

sys.path.insert(0, os.environ["BENCH_DIR"])
from figures import fmt, ratio, rfmt

NAMES = ["passthrough", "JuiceFS", "Cairn", "Cairn r1"]
MOUNT_BOUND_MIB, DATA_BOUND_MIB = 512, 256

def size(v):
    try:
        n = int(v)
    except ValueError:
        return v
    for u, d in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= d and n % d == 0:
            return "%d%s" % (n // d, u)
    return str(n)

def figure(op, name):
    for f in op["figures"]:
        if f["name"] == name:
            return f.get("median")
    return None

path, rss_path = sys.argv[1], sys.argv[2]
if not os.path.exists(path):
    print("no report: %s" % path)
    sys.exit(1)
rep = json.load(open(path))
wls = rep["workloads"]
print("data path; median over %s repetition(s); * = phase hit its time bound; ratios of MiB/s (of ops/s where no data moves)"
      % rep["config"].get("repetitions", "?"))
if wls:
    for i, t in enumerate(wls[0]["targets"]):
        print("  %-12s %s" % (NAMES[i] if i < len(NAMES) else "?", t["target"]))
for wl in wls:
    v = wl["spec"]["values"]
    keys = [k for k in ("sizes", "files", "file_size", "block_size", "ops", "direct", "fsync", "drop_cache") if k in v]
    shape = " ".join("%s=%s" % (k, ",".join(size(x) for x in v[k].split(",")) if k in ("sizes", "file_size", "block_size") else v[k])
                     for k in keys)
    print("  %-22s %s threads=%s duration=%s" % (wl["name"], shape, (wl.get("concurrency") or {}).get("threads", "?"), v.get("duration")))
print()
SHORT = ["pass", "JFS", "Cairn", "Cairn r1"]
N = len(SHORT)
print("%-22s %-13s %-6s  %-34s  %-34s" % ("", "", "", "-------------- ops/s -------------", "-------------- MiB/s -------------"))
print("%-22s %-13s %-6s" % ("WORKLOAD", "PHASE", "OP") + "".join("%8s " % n for n in SHORT * 2) +
      "%9s%9s%9s" % ("C/JFS", "C/pass", "r1/JFS"))
seqw = None
cpu = []      # (workload, phase, host CPU ms per op per target) of the write phases
durable = {}  # small-file write phase -> (passthrough with fsync, JuiceFS) ops/s
fsyncs = []   # (workload, phase, p50 µs per target): fsync is timed inside the write phase's window
failures = 0
for wl in wls:
    tg = wl["targets"]
    if len(tg) != N:
        print("%s: %d targets in the report, %d expected" % (wl["name"], len(tg), N))
        continue
    order = []
    for t in tg:
        for ph in t["phases"]:
            for op in ph["ops"]:
                if (ph["phase"], op["op"]) not in order:
                    order.append((ph["phase"], op["op"]))
    for phase, opname in order:
        if opname == "fsync":
            p50 = []
            for t in tg:
                p50.append(next((figure(op, "latency_p50") for ph in t["phases"] if ph["phase"] == phase
                                 for op in ph["ops"] if op["op"] == opname), None))
            fsyncs.append((wl["name"], phase, p50))
            continue
        ops, mibs, trunc = [], [], []
        for t in tg:
            o = m = None
            tr = False
            for ph in t["phases"]:
                if ph["phase"] != phase:
                    continue
                tr = bool(ph.get("truncated"))
                for op in ph["ops"]:
                    if op["op"] == opname:
                        o, m = figure(op, "ops_rate"), figure(op, "throughput")
            ops.append(o)
            mibs.append(m if m else None)
            trunc.append("*" if tr else " ")
        main = mibs if any(mibs) else ops
        line = "%-22s %-13s %-6s" % (wl["name"], phase, opname)
        line += "".join("%8s%s" % (fmt(ops[i]), trunc[i]) for i in range(N))
        line += "".join("%8s%s" % (fmt(mibs[i]), trunc[i]) for i in range(N))
        line += "%9s%9s%9s" % (rfmt(ratio(main[2], main[1])), rfmt(ratio(main[2], main[0])),
                               rfmt(ratio(main[3], main[1])))
        print(line)
        if opname == "write":
            cpu.append((wl["name"], phase, [next((figure(ph, "host_cpu_ms_per_op") for ph in t["phases"]
                                                  if ph["phase"] == phase), None) for t in tg]))
        if wl["kind"] == "small-files" and opname == "write":
            durable.setdefault(phase, {})["fsync" if wl["spec"]["values"].get("fsync") == "true" else "plain"] = ops
        if wl["kind"] == "seq-write" and opname == "write" and seqw is None:
            seqw = (mibs[2], mibs[0], mibs[3], mibs[1])   # Cairn, passthrough, Cairn r1, JuiceFS
print()
if fsyncs:
    print("fsync (inside the write phases' windows, so in their rates), p50 latency pass/JFS/Cairn/Cairn r1:")
    for name, phase, p50 in fsyncs:
        print("  %-22s %s ms" % (name, " / ".join("-" if v is None else "%.3g" % (v / 1000) for v in p50)))
if cpu:
    print("host CPU per operation (every process and the kernel), ms, pass/JFS/Cairn/Cairn r1:")
    for name, phase, v in cpu:
        print("  %-22s %-13s %s" % (name, phase, " / ".join("-" if x is None else "%.3g" % x for x in v)))
for phase, d in durable.items():
    f, p = d.get("fsync"), d.get("plain")
    if f and p and f[0] and p[1]:
        print("small files %s: one durable copy (passthrough, fsync before close) / JuiceFS = %.2fx  (%s / %s files/s)"
              % (phase, f[0] / p[1], fmt(f[0]), fmt(p[1])))
if seqw and seqw[0] and seqw[1]:
    print("seq-write: Cairn / (passthrough / 3) = %.2fx  (%s / (%s / 3) MiB/s: what three replicas on this one disk allow)"
          % (seqw[0] / (seqw[1] / 3), fmt(seqw[0]), fmt(seqw[1])))
else:
    print("seq-write: Cairn / (passthrough / 3) = - (no write throughput in the report)")
if seqw and seqw[2] and seqw[3]:
    print("seq-write: Cairn 1 replica / JuiceFS = %.2fx  (%s / %s MiB/s)" % (seqw[2] / seqw[3], fmt(seqw[2]), fmt(seqw[3])))
else:
    print("seq-write: Cairn 1 replica / JuiceFS = - (no write throughput in the report)")
mount, r1mount, datas = None, None, []
if os.path.exists(rss_path):
    for ln in open(rss_path):
        f = ln.split()
        if len(f) != 3:
            continue
        mib = int(f[2]) / 1024
        if f[0] == "mount":
            mount = mib
        elif f[0] == "r1-mount":
            r1mount = mib
        else:
            datas.append((f[0], mib))
over = []
if mount is not None and mount > MOUNT_BOUND_MIB:
    over.append("mount")
over += [n for n, m in datas if m > DATA_BOUND_MIB]
print("mount peak RSS %s MiB (bound %d MiB), data node peak RSS %s MiB (bound %d MiB)%s"
      % ("-" if mount is None else "%.0f" % mount, MOUNT_BOUND_MIB,
         "/".join("%.0f" % m for _, m in datas) or "-", DATA_BOUND_MIB,
         ("; OVER THE BOUND: " + ", ".join(over)) if over else ""))
print("  (VmHWM of the `cairn mount` child of cairn up and of %s, which serve both volumes, read before the cluster stopped)"
      % (", ".join(n for n, _ in datas) or "no data node found"))
print("r1 mount peak RSS %s MiB (bound %d MiB)%s  (VmHWM of the `cairn mount` of volume r1, 1 replica)"
      % ("-" if r1mount is None else "%.0f" % r1mount, MOUNT_BOUND_MIB,
         "; OVER THE BOUND" if r1mount is not None and r1mount > MOUNT_BOUND_MIB else ""))
if rep.get("failures"):
    print("failures: %d (see %s)" % (len(rep["failures"]), path))
    for f in rep["failures"][:5]:
        print("  %s on %s, repetition %s, %s: %s" % (f.get("workload"), f.get("target"), f.get("repetition"),
                                                    f.get("stage"), (f.get("error") or "")[:200]))
PY
echo "report: $out (report.json, report.html, workloads.yaml, peak-rss.txt); this table: $out/summary.txt"
exit $rc
