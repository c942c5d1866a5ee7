#!/usr/bin/env bash
# Start or stop one peer file system for side-by-side runs of `cairn bench`.
#
#   bench/peers/peer.sh start PEER     prints the mount point on its last line
#   bench/peers/peer.sh stop  PEER [--wipe]
#   bench/peers/peer.sh mount PEER     prints the mount point only
#
# PEER is one of: ceph, juicefs, juicefs-fsync, juicefs-etcd, seaweedfs,
# passthrough, local. juicefs is JuiceFS on Redis as it ships ($JFS_META,
# default redis); juicefs-fsync and juicefs-etcd are second and third
# JuiceFS peers that can run beside it, each with its own state, port and
# mount: Redis with every write fsynced before the answer (one durable copy)
# and three etcd members (Raft, the guarantee of Cairn's three replicas).
# The peers' own start/stop scripts live in $CAIRN_PEERS_DIR (default: the
# shared directory next to the repository, ../shared/peers); they install
# their software only from package registries (apt, PyPI, the Go module
# proxy) and keep their state under /var/tmp/peers. This wrapper only calls
# them and says where each peer is mounted. "local" is the local disk under
# /var/tmp/peers/local, the baseline every DFS is compared with.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEERS_DIR="${CAIRN_PEERS_DIR:-$REPO/../shared/peers}"

usage() { echo "usage: $0 {start|stop|mount} {ceph|juicefs|juicefs-fsync|juicefs-etcd|seaweedfs|passthrough|local} [--wipe]" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
action=$1 peer=$2
shift 2

# The durable JuiceFS flavours: the same scripts under their own settings.
case "$peer" in
  juicefs-fsync)
    export JFS_META=redis-fsync JFS_STATE=/var/tmp/peers/juicefs-fsync JFS_MNT=/mnt/peers/juicefs-fsync \
      JFS_REDIS_PORT=16380 JFS_METRICS=127.0.0.1:9568 JFS_VOLUME=peerjfsfsync ;;
  juicefs-etcd)
    export JFS_META=etcd JFS_STATE=/var/tmp/peers/juicefs-etcd JFS_MNT=/mnt/peers/juicefs-etcd \
      JFS_REDIS_PORT=16381 JFS_ETCD_PORT=23890 JFS_METRICS=127.0.0.1:9569 JFS_VOLUME=peerjfsetcd
    # The peer's start script waits for its members with etcdctl, which
    # Debian ships apart from the server.
    if [[ $action == start ]] && ! command -v etcdctl >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-client >/dev/null
    fi ;;
esac

mountpoint_of() {
  case "$1" in
    ceph) echo "${CEPH_PEER_MNT:-/mnt/peers/ceph}" ;;
    juicefs|juicefs-fsync|juicefs-etcd) echo "${JFS_MNT:-/mnt/peers/juicefs}" ;;
    seaweedfs) echo "${SW_MNT:-/mnt/peers/seaweedfs}" ;;
    passthrough) echo "${PASSTHROUGH_MNT:-/mnt/peers/passthrough}" ;;
    local) echo "${LOCAL_DIR:-/var/tmp/peers/local}" ;;
    *) usage ;;
  esac
}

mnt="$(mountpoint_of "$peer")"
case "$action" in
  mount)
    echo "$mnt" ;;
  start)
    if [[ $peer == local ]]; then
      mkdir -p "$mnt"
    else
      script="$PEERS_DIR/${peer%%-*}/start.sh"
      [[ -x $script ]] || { echo "error: $script not found; set CAIRN_PEERS_DIR" >&2; exit 1; }
      if [[ $peer == passthrough ]]; then
        "$script" "${PASSTHROUGH_SRC:-/var/tmp/peers/passthrough-src}" "$mnt" >&2
      else
        "$script" >&2
      fi
      # Ready means mounted and answering, not only "the script returned".
      for _ in $(seq 1 100); do
        if mountpoint -q "$mnt" && timeout 5 stat -f "$mnt" >/dev/null 2>&1; then break; fi
        sleep 0.1
      done
      mountpoint -q "$mnt" || { echo "error: $peer is not mounted at $mnt" >&2; exit 1; }
    fi
    echo "$mnt" ;;
  stop)
    if [[ $peer != local ]]; then
      script="$PEERS_DIR/${peer%%-*}/stop.sh"
      [[ -x $script ]] || { echo "error: $script not found; set CAIRN_PEERS_DIR" >&2; exit 1; }
      if [[ $peer == passthrough ]]; then "$script" "$mnt" >&2; else "$script" "$@" >&2; fi
    fi ;;
  *) usage ;;
esac
