#!/usr/bin/env bash
# Compare Cairn with peer file systems in one `cairn bench run`: start the
# peers, run the workload on every mount side by side (targets interleaved
# over repetitions, ratios to the first target), stop the peers this script
# started, and leave report.json and report.html in --out.
#
#   bench/peers/compare.sh [--cairn MOUNTPOINT] [--peers LIST] [--keep-running] -- RUN-ARGS...
#
#   --cairn DIR     a mounted Cairn volume (`cairn mount`); it becomes the first
#                   target, so every ratio reads "peer / Cairn". Without it the
#                   first peer in --peers is the reference.
#   --peers LIST    comma-separated, in target order; default local,passthrough,juicefs,seaweedfs,ceph
#   --keep-running  leave the peers mounted afterwards
#   RUN-ARGS        passed to `cairn bench run` (--workload, --set, --repetitions, --out, ...)
#
# Example (metadata as in CFS Table 3, small files as in FalconFS §6.3):
#   bench/peers/compare.sh --cairn /mnt/cairn --peers local,juicefs,ceph -- \
#       --workload metadata --workload small-files --threads 8 --repetitions 3 --out cmp-$(date +%F)
#
# Each run gets its own directory under each mount (cairn bench creates and
# removes it), so the peers can hold other data. Peers that were already
# running are left running.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CAIRN="${CAIRN_BIN:-$REPO/bin/cairn}"
peers="local,passthrough,juicefs,seaweedfs,ceph"
cairn_mnt=""
keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cairn) cairn_mnt=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --keep-running) keep=1; shift ;;
    --) shift; break ;;
    *) echo "unknown option $1 (run-args go after --)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "give the cairn bench run arguments after --, e.g. -- --workload metadata" >&2; exit 2; }
if [[ ! -x $CAIRN ]]; then
  (cd "$REPO" && make build >&2)
fi

started=()
cleanup() {
  if [[ $keep == 0 ]]; then
    for p in "${started[@]}"; do
      "$HERE/peer.sh" stop "$p" || echo "warning: stopping $p failed" >&2
    done
  fi
}
trap cleanup EXIT

targets=()
if [[ -n $cairn_mnt ]]; then
  mountpoint -q "$cairn_mnt" || { echo "error: $cairn_mnt is not a mount point (cairn mount it first)" >&2; exit 1; }
  targets+=(--target "posix:$cairn_mnt")
fi
IFS=',' read -r -a list <<<"$peers"
for p in "${list[@]}"; do
  mnt="$("$HERE/peer.sh" mount "$p")"
  if [[ $p != local ]] && mountpoint -q "$mnt"; then
    echo "$p: already mounted at $mnt, using it" >&2
  else
    mnt="$("$HERE/peer.sh" start "$p" | tail -n 1)"
    [[ $p == local ]] || started+=("$p")
  fi
  targets+=(--target "posix:$mnt")
done

"$CAIRN" bench run "${targets[@]}" "$@"
