#!/usr/bin/env bash
# Metadata side by side: Cairn against JuiceFS and the FUSE ceiling. Two
# `cairn bench run`s on the same targets, in this order:
#
#   1. posix:/mnt/peers/passthrough  the go-fuse loopback of the local disk
#                                    (the FUSE ceiling; first target, so the
#                                    report's own ratios are "÷ passthrough");
#   2. posix:/mnt/peers/juicefs      JuiceFS on Redis as it ships (no fsync: an
#                                    answered create may be lost in a crash);
#   3. posix:/mnt/peers/juicefs-fsync  JuiceFS on Redis with appendfsync always:
#                                    one copy, durable before the answer;
#   (with --etcd) posix:/mnt/peers/juicefs-etcd  JuiceFS on three etcd members:
#                                    Raft, the guarantee of three replicas;
#   4. posix:DIR/mnt                 a fresh `cairn up` cluster's FUSE mount,
#                                    volume default (three replicas);
#   5. posix:WORK/mnt-r1             the same cluster's volume r1 with one replica
#                                    (`cairn volume create r1 --replicas 1`): one
#                                    durable copy, as Redis with fsync keeps;
#   6. cairn:MASTER/default          volume default through the SDK (stateless).
#
# Both Cairn mounts read the meta nodes' counts (--meta-metrics): requests,
# Raft proposals and synced log writes per operation, printed per phase.
#
# The first run is `metadata` (mdtest-like: DirCreation ... FileRemoval, then
# TreeCreation and TreeRemoval), the second `dl-traversal` (a tree read in a
# random order once per epoch; built once per file system as a kept tree shared
# by the mount and the SDK, and removed from the peers at the end; its files
# are evicted from the page cache after every setup, so that epoch 1 is cold
# in every repetition, not only the first). Then it
# prints one compact table: per phase the ops/s of every target (median over
# the repetitions), the ratios Cairn ÷ JuiceFS on fsynced Redis (three
# replicas and r1), Cairn ÷ JuiceFS on plain Redis, the SDK's, Cairn ÷
# passthrough (and three replicas ÷ JuiceFS on etcd with --etcd), with the
# geometric mean of the eight metadata phases DirCreation, DirStat,
# DirRemoval, FileCreation, FileStat, FileRead, Rename and FileRemoval; then
# per phase the meta nodes' requests, Raft proposals and synced log writes
# per operation of both Cairn mounts.
#
#   bench/meta.sh [--out DIR] [--files N] [--threads N] [--repetitions N]
#       [--duration D] [--dl-files N] [--dl-fanout N] [--dl-depth N]
#       [--dl-file-size SIZE] [--dl-epochs N] [--no-dl] [--etcd]
#       [--setup-timeout D]
#
# Defaults: --files 500 (directories and files per thread), --threads 8,
# --repetitions 3, the workloads' 60s bound per phase (--duration), and a
# dl-traversal tree of --dl-files 4096 files of --dl-file-size 4KiB in
# --dl-fanout 8 ^ --dl-depth 2 = 64 leaf directories, --dl-epochs 2. The
# environment can set the same: BENCH_META_FILES, BENCH_META_THREADS,
# BENCH_META_REPETITIONS, BENCH_META_DL_FILES (flags win). `make bench-meta`
# runs it (flags through BENCH_META_FLAGS). The reports go to
# DIR/metadata and DIR/dl-traversal (default bench-reports/meta-TIMESTAMP),
# the table to DIR/summary.txt.
#
# A peer that is already mounted is used and left running; a peer this script
# starts (bench/peers/peer.sh) is stopped on exit, as is the cluster, also on
# failure or Ctrl-C. The work directory is removed after a success and kept
# with the logs after a failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
CAIRN=${CAIRN_BIN:-$REPO/bin/cairn}
PEER=$HERE/peers/peer.sh
out=$REPO/bench-reports/meta-$(date -u +%Y%m%dT%H%M%SZ)
files=${BENCH_META_FILES:-500}
threads=${BENCH_META_THREADS:-8}
reps=${BENCH_META_REPETITIONS:-3}
dl_files=${BENCH_META_DL_FILES:-4096}
dl_fanout=8
dl_depth=2
dl_size=4KiB
dl_epochs=2
duration=""
setup_timeout=30m
dl=1
etcd=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repetitions) reps=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --dl-files) dl_files=$2; shift 2 ;;
    --dl-fanout) dl_fanout=$2; shift 2 ;;
    --dl-depth) dl_depth=$2; shift 2 ;;
    --dl-file-size) dl_size=$2; shift 2 ;;
    --dl-epochs) dl_epochs=$2; shift 2 ;;
    --no-dl) dl=0; shift ;;
    --etcd) etcd=1; shift ;;
    --setup-timeout) setup_timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;p}' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in files threads reps dl_files dl_fanout dl_depth dl_epochs; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "error: --${v//_/-} wants a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }
[[ -x $PEER ]] || { echo "error: $PEER missing" >&2; exit 2; }
[[ -e /dev/fuse ]] || { echo "error: no /dev/fuse: the FUSE targets cannot be mounted" >&2; exit 2; }
command -v python3 >/dev/null || { echo "error: python3 is needed to read report.json" >&2; exit 2; }

# dl-traversal tree: fanout^depth leaves with enough files each for --dl-files.
leaves=1
for ((i = 0; i < dl_depth; i++)); do leaves=$((leaves * dl_fanout)); done
per_dir=$(( (dl_files + leaves - 1) / leaves ))

WORK=$(mktemp -d /var/tmp/cairn-meta.XXXXXX)
DATA=$WORK/cluster
MNT=$DATA/mnt
MNT1=$WORK/mnt-r1   # volume r1 (one replica), mounted by this script
# A name of this run only: the tree is kept by the bench on every target and
# removed from the peers by this script (the cluster is thrown away).
tree=bench-meta-${WORK##*.}-${dl_fanout}x${dl_depth}x${per_dir}-${dl_size}
UP_PID=""
R1_PID=""
started=()     # peers this script started (and stops)
peer_mnts=()   # every peer mount used (the dl tree is removed from each)
tree_made=0

# stop, unmount_left, start_peers, stop_peers, start_up, mount_r1
. "$HERE/lib.sh"
cleanup() {
  local rc=$?
  set +e
  if (( tree_made )); then
    for m in "${peer_mnts[@]}"; do
      [[ -d $m/$tree ]] && { echo "removing the dl-traversal tree $m/$tree"; rm -rf "${m:?}/$tree"; }
    done
  fi
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

# The peers: passthrough (the ceiling, first target), then JuiceFS as it
# ships, on fsynced Redis, and (--etcd) on etcd.
peers=(passthrough juicefs juicefs-fsync)
names=(passthrough "JFS redis" "JFS fsync")
(( etcd )) && { peers+=(juicefs-etcd); names+=("JFS etcd"); }
start_peers "${peers[@]}"

start_up "$DATA" "$MNT"
mount_r1 "$DATA" "$MNT1"

targets=()
for m in "${peer_mnts[@]}"; do targets+=(--target "posix:$m"); done
targets+=(--target "posix:$MNT" --target "posix:$MNT1" --target "cairn:$master/default"
  --meta-metrics "posix:$MNT=$master/default" --meta-metrics "posix:$MNT1=$master/r1")
names+=("Cairn" "Cairn r1" "Cairn SDK")
common=(--threads "$threads" --repetitions "$reps" --progress lines --progress-interval 30s)
[[ -z $duration ]] || common+=(--set "duration=$duration")
mkdir -p "$out"
rc=0

# run NAME ARGS...: one cairn bench run into $out/NAME; a usage error (2)
# stops the script, a run-time failure (1) is reported and the rest goes on.
run() {
  local name=$1; shift
  local r=0
  "$CAIRN" bench run "$@" "${common[@]}" "${targets[@]}" --out "$out/$name" || r=$?
  if (( r != 0 )); then
    for _ in $(seq 1 30); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$UP_PID" 2>/dev/null || { echo "cairn up has stopped (interrupted?); partial reports in $out" >&2; exit 130; }
    (( r == 2 )) && { echo "error: cairn bench run refused its arguments" >&2; exit 2; }
    echo "warning: cairn bench run ($name) exited $r; its report holds what was measured" >&2
    rc=1
  fi
}

echo
echo "=== 1/$((1 + dl)): metadata, --files $files per thread, $threads threads, $reps repetition(s) ==="
run metadata --workload metadata --set "files=$files"

if (( dl )); then
  echo
  echo "=== 2/2: dl-traversal, tree $tree: $leaves leaf directories x $per_dir files of $dl_size ($((leaves * per_dir)) files), $dl_epochs epoch(s) ==="
  tree_made=1
  run dl-traversal --workload dl-traversal --set "fanout=$dl_fanout" --set "depth=$dl_depth" \
    --set "files_per_dir=$per_dir" --set "file_size=$dl_size" --set "epochs=$dl_epochs" \
    --set "tree=$tree" --set drop_cache=true --setup-timeout "$setup_timeout"
fi

echo
reports=("$out/metadata/report.json")
(( dl )) && reports+=("$out/dl-traversal/report.json")
TARGET_NAMES=$(IFS=,; echo "${names[*]}") BENCH_DIR="$HERE" PYTHONDONTWRITEBYTECODE=1 \
  python3 - "${reports[@]}" <<'PY' | tee "$out/summary.txt" || rc=1
import json, math, os, sys

sys.path.insert(0, os.environ["BENCH_DIR"])
from figures import fmt, ratio, rfmt

EIGHT = ["DirCreation", "DirStat", "DirRemoval", "FileCreation",
         "FileStat", "FileRead", "Rename", "FileRemoval"]
NAMES = os.environ["TARGET_NAMES"].split(",")
# Ratio columns: (heading, numerator, denominator) by target name; a column
# whose targets were not run is left out.
RATIOS = [(h, a, b) for h, a, b in [
    ("C/JFSfsync", "Cairn", "JFS fsync"), ("r1/JFSfsync", "Cairn r1", "JFS fsync"),
    ("C/JFSetcd", "Cairn", "JFS etcd"), ("C/JFSredis", "Cairn", "JFS redis"),
    ("SDK/JFSredis", "Cairn SDK", "JFS redis"), ("C/pass", "Cairn", "passthrough")]
    if a in NAMES and b in NAMES]
COUNTS = [("requests", "server_meta_requests_per_op"), ("proposals", "server_raft_proposals_per_op"),
          ("syncs", "server_raft_syncs_per_op"), ("CPU ms", "host_cpu_ms_per_op")]

def phase_figure(t, phase, key):
    """The median over repetitions of figure key of phase on target t."""
    for ph in t["phases"]:
        if ph["phase"] == phase:
            for f in ph.get("figures") or []:
                if f["name"] == key:
                    return f.get("median")
    return None

for path in sys.argv[1:]:
    if not os.path.exists(path):
        print("no report: %s" % path)
        continue
    rep = json.load(open(path))
    for wl in rep["workloads"]:
        tg = wl["targets"]
        if len(tg) != len(NAMES):
            print("%s: %d targets in the report, %d expected" % (wl["name"], len(tg), len(NAMES)))
            continue
        idx = {n: i for i, n in enumerate(NAMES)}
        vals = wl["spec"]["values"]
        conc = wl.get("concurrency") or {}
        shape = ", ".join("%s=%s" % (k, vals[k]) for k in
                          ("files", "fanout", "depth", "files_per_dir", "file_size", "epochs")
                          if k in vals and (wl["kind"] != "metadata" or k == "files"))
        print("%s (%s; %s threads, %s repetition(s)); ops/s, median over repetitions; * = phase hit its time bound"
              % (wl["name"], shape, conc.get("threads", "?"), rep["config"].get("repetitions", "?")))
        for i, t in enumerate(tg):
            print("  %-12s %s" % (NAMES[i], t["target"]))
        print("%-13s %-7s" % ("PHASE", "OP") + "".join("%11s " % n for n in NAMES) +
              "".join("%13s" % r[0] for r in RATIOS))
        # phases and ops in the order of the first target that has them
        order = []
        for t in tg:
            for ph in t["phases"]:
                for op in ph["ops"]:
                    if (ph["phase"], op["op"]) not in order:
                        order.append((ph["phase"], op["op"]))
        geo = {}   # ratio column -> ratios over the eight phases
        for phase, opname in order:
            rates, cells = [], []
            for t in tg:
                v, trunc = None, False
                for ph in t["phases"]:
                    if ph["phase"] != phase:
                        continue
                    trunc = bool(ph.get("truncated"))
                    for op in ph["ops"]:
                        if op["op"] == opname:
                            for f in op["figures"]:
                                if f["name"] == "ops_rate":
                                    v = f.get("median")
                rates.append(v)
                cells.append(fmt(v) + ("*" if trunc else " "))
            line = "%-13s %-7s" % (phase, opname) + "".join("%12s" % c for c in cells)
            for name, a, b in RATIOS:
                r = ratio(rates[idx[a]], rates[idx[b]])
                line += "%13s" % rfmt(r)
                if wl["kind"] == "metadata" and phase in EIGHT and r is not None:
                    geo.setdefault(name, []).append(r)
            print(line)
        if wl["kind"] == "metadata":
            line = "%-21s" % "geomean (8 phases)" + " " * (12 * len(NAMES))
            for name, _, _ in RATIOS:
                rs = geo.get(name, [])
                g = math.exp(sum(math.log(r) for r in rs) / len(rs)) if rs else None
                line += "%13s" % rfmt(g)
            print(line)
            print()
            print("Per operation (medians over repetitions): requests, Raft proposals and synced log writes (every replica's)")
            print("from the meta nodes' counters; CPU ms: the host's CPU (every process and the kernel):")
            cairn = [n for n in ("Cairn", "Cairn r1") if n in idx]
            print("%-13s" % "PHASE" + "".join("%16s" % ("%s %s" % (n.replace("Cairn", "C"), c)) for n in cairn for c, _ in COUNTS))
            for phase, _ in order:
                line = "%-13s" % phase
                for n in cairn:
                    for _, key in COUNTS:
                        line += "%16s" % fmt(phase_figure(tg[idx[n]], phase, key))
                print(line)
        if rep.get("failures"):
            print("failures: %d (see %s)" % (len(rep["failures"]), path))
        print()
PY
if (( dl )); then
  echo "reports: $out/metadata and $out/dl-traversal (report.json, report.html); this table: $out/summary.txt"
else
  echo "report: $out/metadata (report.json, report.html); this table: $out/summary.txt"
fi
exit $rc
