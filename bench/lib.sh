# Shared by the side-by-side benchmark scripts (bench/meta.sh,
# bench/data.sh): stopping processes, starting the peers and a fresh
# `cairn up`, mounting a one-replica volume beside it. Source it after
# setting HERE, CAIRN, PEER and WORK; it uses (and sets) UP_PID, R1_PID,
# master, started (peers started here, to stop) and peer_mnts (every peer
# mount used).

# stop PID NAME [SECONDS]: SIGTERM, up to SECONDS (default 60), then SIGKILL.
stop() {
  local pid=$1 name=$2 secs=${3:-60}
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$name ($pid) still alive after $secs s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
}

# unmount_left DIR: a lazy unmount of DIR if it is still mounted, or mounted
# by a process that is gone (stat fails: "transport endpoint is not connected").
unmount_left() {
  if mountpoint -q "$1" 2>/dev/null || { [[ -e $1 ]] && ! stat "$1" >/dev/null 2>&1; }; then
    fusermount3 -u -z "$1" 2>/dev/null || umount -l "$1" 2>/dev/null
  fi
}

# start_peers NAME...: mounts each peer with bench/peers/peer.sh, in order,
# appending its mount to peer_mnts. A peer already mounted is used and
# left running; one started here is added to started (stop_peers stops it).
start_peers() {
  local p mnt
  for p in "$@"; do
    mnt=$("$PEER" mount "$p")
    if mountpoint -q "$mnt" 2>/dev/null; then
      timeout 10 stat -f "$mnt" >/dev/null 2>&1 || { echo "error: $p is mounted at $mnt but does not answer (not ours: left alone)" >&2; exit 1; }
      echo "$p: already mounted at $mnt, using it (left running)"
    else
      echo "$p: starting it with bench/peers/peer.sh"
      started+=("$p")
      mnt=$("$PEER" start "$p" 2>"$WORK/peer-$p.log" | tail -n 1) || { echo "error: starting $p failed:" >&2; tail -20 "$WORK/peer-$p.log" >&2; exit 1; }
      echo "$p: mounted at $mnt"
    fi
    peer_mnts+=("$mnt")
  done
}

# stop_peers: stops the peers start_peers started.
stop_peers() {
  local p
  for p in "${started[@]}"; do
    echo "stopping the $p peer (started by this script)"
    "$PEER" stop "$p" >/dev/null 2>&1 || echo "warning: stopping $p failed" >&2
  done
}

# wait_log PID LOG PATTERN SECONDS NAME: waits until LOG has a line matching
# PATTERN (grep); exits with LOG shown if PID exits first or SECONDS pass.
wait_log() {
  local pid=$1 log=$2 pattern=$3 secs=$4 name=$5
  for _ in $(seq 1 $((secs * 10))); do
    grep -q "$pattern" "$log" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "error: $name exited:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  grep -q "$pattern" "$log" || { echo "error: $name not ready after $secs s:" >&2; tail -20 "$log" >&2; exit 1; }
}

# start_up DATA MNT: a fresh `cairn up` on DATA (log in WORK/up.log), which
# mounts volume default on MNT; sets UP_PID and master (the masters'
# addresses, comma-separated).
start_up() {
  local data=$1 mnt=$2
  echo "starting cairn up on $data (mount $mnt)"
  "$CAIRN" up --data-dir "$data" >"$WORK/up.log" 2>&1 &
  UP_PID=$!
  wait_log "$UP_PID" "$WORK/up.log" "^Data dir:" 90 "cairn up"
  mountpoint -q "$mnt" || { echo "error: cairn up did not mount $mnt:" >&2; tail -20 "$WORK/up.log" >&2; exit 1; }
  master=$(python3 -c 'import json,sys
procs = json.load(open(sys.argv[1]))["procs"]
print(",".join(p["addr"] for p in procs if p["role"] == "master"))' "$data/cluster.json")
  [[ -n $master ]] || { echo "error: no master in $data/cluster.json" >&2; exit 1; }
  # The SDK targets (cairn:) and --meta-metrics connect with the admin
  # identity cairn up created.
  export CAIRN_TLS_DIR="$data/tls/admin"
  echo "cluster up, master $master, volume default mounted at $mnt"
}

# mount_r1 DATA MNT1: creates volume r1 with one replica of every partition
# (`cairn volume create r1 --replicas 1`) in the cluster of DATA and mounts
# it on MNT1 with a `cairn mount` (log in WORK/mount-r1.log); sets R1_PID.
mount_r1() {
  local data=$1 mnt=$2
  "$CAIRN" volume create r1 --replicas 1 --data-dir "$data" >"$WORK/volume-r1.log" 2>&1 ||
    { echo "error: cairn volume create r1 --replicas 1 failed:" >&2; cat "$WORK/volume-r1.log" >&2; exit 1; }
  mkdir -p "$mnt"
  "$CAIRN" mount --data-dir "$data" r1 "$mnt" >"$WORK/mount-r1.log" 2>&1 &
  R1_PID=$!
  wait_log "$R1_PID" "$WORK/mount-r1.log" "mounted volume" 30 "cairn mount r1"
  mountpoint -q "$mnt" || { echo "error: cairn mount r1 says it mounted, but $mnt is not a mount point:" >&2; tail -20 "$WORK/mount-r1.log" >&2; exit 1; }
  echo "volume r1 (1 replica) mounted at $mnt (cairn mount, pid $R1_PID)"
}
