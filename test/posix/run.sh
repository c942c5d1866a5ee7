#!/bin/bash
# Run the POSIX suite pjdfstest (Rust port, crates.io) on a fresh `cairn up`
# mount, as ../shared/posix/README.md describes, print its summary and exit
# non-zero when fewer than $MIN_PASS percent of the tests pass.
#   test/posix/run.sh            (from the repository root; `make posix` does it)
# Environment: CAIRN_BIN (default bin/cairn), MIN_PASS (default 95),
# PJDFSTEST (default: from PATH or ~/.cargo/bin), PJDFSTEST_CONFIG (default:
# test/posix/pjdfstest.toml, a copy of ../shared/posix/pjdfstest.toml),
# KEEP_LOG=1 keeps the work dir (cairn up log, full pjdfstest output).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CAIRN=${CAIRN_BIN:-$ROOT/bin/cairn}
MIN_PASS=${MIN_PASS:-95}
PJDFSTEST_VERSION=${PJDFSTEST_VERSION:-0.2.2}

[[ $(id -u) -eq 0 ]] || { echo "error: pjdfstest switches users: run as root" >&2; exit 2; }
[[ -e /dev/fuse ]] || { echo "error: no /dev/fuse on this machine" >&2; exit 2; }
[[ -x $CAIRN ]] || { echo "error: $CAIRN not built (make build)" >&2; exit 2; }

PJD=${PJDFSTEST:-$(command -v pjdfstest || true)}
[[ -n $PJD ]] || PJD=$HOME/.cargo/bin/pjdfstest
if [[ ! -x $PJD ]]; then
  if command -v cargo >/dev/null; then
    echo "installing pjdfstest $PJDFSTEST_VERSION with cargo (a few minutes)"
    cargo install pjdfstest --version "$PJDFSTEST_VERSION" --locked
    PJD=$(command -v pjdfstest || echo "$HOME/.cargo/bin/pjdfstest")
  else
    echo "error: pjdfstest is not installed and cargo is missing;" >&2
    echo "  install Rust (https://rustup.rs) then: cargo install pjdfstest --version $PJDFSTEST_VERSION --locked" >&2
    exit 2
  fi
fi

# The unprivileged users pjdfstest switches to must reach the mount: 0755 dirs.
WORK=$(mktemp -d /tmp/cairn-posix.XXXXXX)
chmod 755 "$WORK"
DATA=$WORK/data
MNT=$DATA/mnt
LOG=$WORK/up.log
LINK=$WORK/p                       # short path: socket tests need < 108 bytes
UP_PID=""

cleanup() {
  local rc=$?
  set +e
  if [[ -n $UP_PID ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID"
    for _ in $(seq 1 600); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$UP_PID" 2>/dev/null; then
      echo "cairn up (pid $UP_PID) still alive after 60 s: SIGKILL" >&2
      kill -KILL "$UP_PID"
    fi
    wait "$UP_PID" 2>/dev/null
  fi
  if mountpoint -q "$MNT" 2>/dev/null || ! stat "$MNT" >/dev/null 2>&1; then
    umount -l "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" 2>/dev/null
  fi
  if [[ ${KEEP_LOG:-} == 1 || $rc -ne 0 ]]; then
    echo "logs kept in $WORK (cairn up: $LOG)"
  else
    rm -rf "$WORK"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "starting cairn up on $DATA"
"$CAIRN" up --data-dir "$DATA" >"$LOG" 2>&1 &
UP_PID=$!
for _ in $(seq 1 900); do
  grep -q "Cairn is up" "$LOG" && break
  kill -0 "$UP_PID" 2>/dev/null || { echo "error: cairn up exited:" >&2; cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
grep -q "Cairn is up" "$LOG" || { echo "error: cairn up not ready after 90 s" >&2; tail -50 "$LOG" >&2; exit 1; }
mountpoint -q "$MNT" || { echo "error: $MNT is not mounted" >&2; exit 1; }

mkdir -p "$MNT/pjd" && chmod 755 "$MNT/pjd"
ln -sfn "$MNT/pjd" "$LINK"
OUT=$WORK/pjdfstest.out
echo "running $PJD on $MNT/pjd (via $LINK)"
start=$(date +%s)
set +e
(cd "$WORK" && "$PJD" -c "${PJDFSTEST_CONFIG:-$HERE/pjdfstest.toml}" -p "$LINK") >"$OUT" 2>&1
prc=$?
set -e
echo "pjdfstest exited $prc after $(( $(date +%s) - start )) s (full output: $OUT, kept with KEEP_LOG=1)"
# Every failing or skipped test with the reason pjdfstest gives on the next line.
# (An expected failure that passes counts as failed: "PASSED UNEXPECTEDLY".)
awk '/ (skipped|FAILED)$/ { name = $1; state = $NF; getline reason; sub(/^[ \t]+/, "", reason);
  printf "%-8s %s: %s\n", state, name, reason }
  / PASSED UNEXPECTEDLY$/ { printf "%-8s %s: listed in expected_failures but passed\n", "FAILED", $1 }' "$OUT" | sort
summary=$(grep -E '^Summary:' "$OUT" | tail -1 || true)
[[ -n $summary ]] || { echo "error: no summary in pjdfstest output:" >&2; tail -30 "$OUT" >&2; exit 1; }
echo "$summary"
passed=$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$summary")
failed=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$summary")
skipped=$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$summary")
total=$(( passed + failed + skipped ))
# The pass rate counts tests that ran (skipped = feature not applicable).
ran=$(( passed + failed ))
(( ran > 0 )) || { echo "error: no test ran" >&2; exit 1; }
pct=$(( passed * 1000 / ran ))
printf 'cairn: %d passed, %d failed, %d skipped of %d (%d.%d%% of run tests passed; local ext4: 356/0/42)\n' \
  "$passed" "$failed" "$skipped" "$total" $((pct / 10)) $((pct % 10))
if (( passed * 100 < MIN_PASS * ran )); then
  echo "FAIL: below $MIN_PASS% passed" >&2
  exit 1
fi
echo "OK: at least $MIN_PASS% passed"
