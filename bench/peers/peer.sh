#!/usr/bin/env bash
# Start or stop one peer file system for side-by-side runs of `cairn bench`.
#
#   bench/peers/peer.sh start PEER     prints the mount point on its last line
#   bench/peers/peer.sh stop  PEER [--wipe]
#   bench/peers/peer.sh mount PEER     prints the mount point only
#
# PEER is one of: ceph, juicefs, seaweedfs, passthrough, local.
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

usage() { echo "usage: $0 {start|stop|mount} {ceph|juicefs|seaweedfs|passthrough|local} [--wipe]" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
action=$1 peer=$2
shift 2

mountpoint_of() {
  case "$1" in
    ceph) echo "${CEPH_PEER_MNT:-/mnt/peers/ceph}" ;;
    juicefs) echo "${JFS_MNT:-/mnt/peers/juicefs}" ;;
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
      script="$PEERS_DIR/$peer/start.sh"
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
      script="$PEERS_DIR/$peer/stop.sh"
      [[ -x $script ]] || { echo "error: $script not found; set CAIRN_PEERS_DIR" >&2; exit 1; }
      if [[ $peer == passthrough ]]; then "$script" "$mnt" >&2; else "$script" "$@" >&2; fi
    fi ;;
  *) usage ;;
esac
