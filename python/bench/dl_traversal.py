"""The dl-traversal read from Python: cairnfs vs the Cairn mount (vs JuiceFS).

A deep-learning data loader's epoch: every file of a tree of small files
read once, whole, in random order, by THREADS threads of one Python
process. The tree (default 5,000 files of 16 KiB in 1,100 directories: 100
top directories of 10 leaves each) is built once per file system; each
reader then runs cold, in a fresh process that never read the tree:

  cairnfs   fs.cat_file(path) through the Go SDK's stateless path API
            (one metadata request per open, no kernel in the way);
  cairnfs-batch
            the same files in batches of --batch (32) per call of
            fs.cat_files, as a PyTorch DataLoader's batches through
            FileDataset.__getitems__: one call into the library per batch,
            whose files the library reads 16 at a time;
  mount     open(path).read() on the `cairn up` FUSE mount of the same
            volume (never looked at through the mount before: no kernel
            page or dentry cache for it);
  juicefs   the same Python code on the JuiceFS peer's mount
            (/work/shared/peers/juicefs, with --juicefs), its tree written
            through its mount and each file's page cache dropped after the
            write (posix_fadvise DONTNEED: nothing global is flushed).

  python bench/dl_traversal.py [--cairn-bin bin/cairn] [--files 5000]
      [--top 100] [--leaves 10] [--size 16384] [--threads 8] [--rounds 3]
      [--batch 32] [--juicefs] [--keep DIR]

It starts its own `cairn up` in a temporary directory (or DIR with --keep)
and stops it by PID at the end. Each of --rounds rounds builds a tree of its
own and reads it with every reader (cairnfs first in odd rounds, the mount
first in even ones; JuiceFS starts from fresh state every round); it prints
files/s per reader and round, and the ratios of the medians cairnfs / mount
and cairnfs / juicefs.
"""

import argparse
import concurrent.futures as cf
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
UP_TIMEOUT_S = 120
READ_TIMEOUT_S = 1800
JUICEFS = "/work/shared/peers/juicefs"
JUICEFS_MNT = "/mnt/peers/juicefs"


def tree(files, top, leaves):
    """The tree's file paths, relative: tNN/lN/fNNNNN."""
    dirs = [f"t{t:03d}/l{l:02d}" for t in range(top) for l in range(leaves)]
    return [f"{dirs[i % len(dirs)]}/f{i:06d}" for i in range(files)]


def build(fs_kind, root, paths, size, threads, data_dir=None):
    """Writes the tree under root: through cairnfs (root cairn://VOL/dir)
    or the OS (a directory), size random bytes per file."""
    payload = os.urandom(size)
    if fs_kind == "cairnfs":
        import cairnfs
        fs = cairnfs.CairnFileSystem(data_dir=data_dir)
        for d in sorted({p.rsplit("/", 1)[0] for p in paths}):
            fs.makedirs(f"{root}/{d}", exist_ok=True)

        def put(p):
            fs.pipe_file(f"{root}/{p}", payload)
    else:
        for d in sorted({p.rsplit("/", 1)[0] for p in paths}):
            os.makedirs(os.path.join(root, d), exist_ok=True)

        def put(p):
            fd = os.open(os.path.join(root, p), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, payload)
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    with cf.ThreadPoolExecutor(threads) as pool:
        list(pool.map(put, paths))


def read(fs_kind, root, paths, size, threads, data_dir=None, seed=1, batch=32):
    """Reads every file once in random order with threads threads; returns
    the measurement (the volume open is done before the clock starts)."""
    order = list(paths)
    random.Random(seed).shuffle(order)
    work = order
    if fs_kind in ("cairnfs", "cairnfs-batch"):
        import cairnfs
        fs = cairnfs.CairnFileSystem(data_dir=data_dir)
        t0 = time.monotonic()
        fs.info(root.split("/", 1)[0])  # connect: masters, map, TLS
        connect_s = time.monotonic() - t0

        def get(p):
            return len(fs.cat_file(f"{root}/{p}"))

        if fs_kind == "cairnfs-batch":
            # A DataLoader's batches: each thread fetches batch files in
            # one call (cat_files, as FileDataset.__getitems__ does).
            work = [order[i:i + batch] for i in range(0, len(order), batch)]

            def get(b):
                return [len(x) if isinstance(x, bytes) else -1 for x in fs.cat_files([f"{root}/{p}" for p in b])]
    else:
        connect_s = 0.0

        def get(p):
            with open(os.path.join(root, p), "rb") as f:
                return len(f.read())
    start = time.monotonic()
    with cf.ThreadPoolExecutor(threads) as pool:
        sizes = list(pool.map(get, work))
    elapsed = time.monotonic() - start
    if work is not order:
        sizes = [n for b in sizes for n in b]
    bad = sum(1 for s in sizes if s != size)
    if bad:
        raise SystemExit(f"{fs_kind}: {bad} files read with the wrong size")
    return {"reader": fs_kind, "files": len(order), "threads": threads, "seconds": round(elapsed, 3),
            "files_per_s": round(len(order) / elapsed, 1), "connect_s": round(connect_s, 3)}


def fresh_read(name, kind, root, args, data_dir=None):
    """read() in a fresh Python process (a cold epoch); its result."""
    cmd = [sys.executable, os.path.abspath(__file__), "_read", kind, root, "--files", str(args.files),
           "--top", str(args.top), "--leaves", str(args.leaves), "--size", str(args.size),
           "--threads", str(args.threads), "--batch", str(args.batch)]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=READ_TIMEOUT_S)
    if out.returncode != 0:
        raise SystemExit(f"{name} reader failed:\n{out.stderr}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["reader"] = name
    print(f"  {name:8s} {r['files_per_s']:>9.1f} files/s  ({r['files']} files in {r['seconds']} s, "
          f"{r['threads']} threads; volume open {r['connect_s']} s before the clock)", flush=True)
    return r


def start_cluster(binary, data_dir):
    log_path = os.path.join(os.path.dirname(data_dir), "up.log")
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "up", "--data-dir", data_dir, "--s3=false", "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + UP_TIMEOUT_S
    while True:
        with open(log_path, errors="replace") as f:
            if "Cairn is up" in f.read():
                break
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_cluster(proc)
            with open(log_path, errors="replace") as f:
                raise SystemExit("cairn up did not come up:\n" + f.read()[-3000:])
        time.sleep(0.2)
    mnt = os.path.join(data_dir, "mnt")
    while not os.path.ismount(mnt) and time.monotonic() < deadline:
        time.sleep(0.2)
    return proc, mnt if os.path.ismount(mnt) else None


def stop_cluster(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def juicefs(args, paths):
    """Starts the JuiceFS peer from fresh state, builds the tree on it and
    reads it cold; None if the peer does not start."""
    start = subprocess.run([os.path.join(JUICEFS, "start.sh")], capture_output=True, text=True, timeout=600)
    if start.returncode != 0 or "READY" not in start.stdout + start.stderr:
        print(f"  juicefs  peer did not start, left out:\n{start.stderr[-2000:]}")
        return None
    try:
        root = os.path.join(JUICEFS_MNT, "dl")
        t0 = time.monotonic()
        build("posix", root, paths, args.size, args.threads)
        print(f"  built the tree on JuiceFS in {time.monotonic() - t0:.1f} s", flush=True)
        return fresh_read("juicefs", "posix", root, args)
    finally:
        subprocess.run([os.path.join(JUICEFS, "stop.sh"), "--wipe"], capture_output=True, timeout=300)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", nargs="?", default="run", help=argparse.SUPPRESS)
    ap.add_argument("kind", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("root", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--cairn-bin", default=os.environ.get("CAIRN_BIN") or os.path.join(REPO, "bin", "cairn"))
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--top", type=int, default=100)
    ap.add_argument("--leaves", type=int, default=10)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="trees built and read cold, each by every reader")
    ap.add_argument("--juicefs", action="store_true", help="also read the tree on the JuiceFS peer")
    ap.add_argument("--batch", type=int, default=32,
                    help="files per call of the cairnfs-batch reader (cat_files, as a DataLoader's batch); 0 leaves it out")
    ap.add_argument("--keep", help="run the cluster in this directory and keep it")
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    paths = tree(args.files, args.top, args.leaves)
    if args.cmd == "_read":
        print(json.dumps(read(args.kind, args.root, paths, args.size, args.threads, args.data_dir, batch=args.batch)))
        return

    work = args.keep or tempfile.mkdtemp(prefix="cairn-bench-python-")
    data_dir = os.path.join(work, "data")
    print(f"dl-traversal from Python: {args.files} files of {args.size} B in "
          f"{args.top * (args.leaves + 1)} directories, {args.threads} threads, {args.rounds} round(s) "
          "of one cold epoch per reader, each round on a tree of its own")
    proc, mnt = start_cluster(args.cairn_bin, data_dir)
    results = {"cairnfs": [], "mount": []}
    if args.batch > 0:
        results["cairnfs-batch"] = []
    try:
        for r in range(args.rounds):
            root = f"default/dl{r}"
            t0 = time.monotonic()
            build("cairnfs", root, paths, args.size, args.threads, data_dir)
            print(f"round {r + 1}: built the tree through cairnfs in {time.monotonic() - t0:.1f} s", flush=True)
            readers = [("cairnfs", lambda: fresh_read("cairnfs", "cairnfs", root, args, data_dir))]
            if args.batch > 0:
                readers.append(("cairnfs-batch", lambda: fresh_read("cairnfs-batch", "cairnfs-batch", root, args, data_dir)))
            if mnt:
                readers.append(("mount", lambda: fresh_read("mount", "posix", os.path.join(mnt, root[8:]), args)))
            else:
                print("  mount    left out: the volume is not mounted (no FUSE here?)")
            if r % 2:
                readers.reverse()  # neither reader always goes first
            for name, run in readers:
                results[name].append(run())
    finally:
        stop_cluster(proc)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.juicefs:
        results["juicefs"] = []
        for r in range(args.rounds):
            got = juicefs(args, paths)
            if not got:
                break
            results["juicefs"].append(got)
    med = {k: statistics.median(x["files_per_s"] for x in v) for k, v in results.items() if v}
    print("median files/s: " + ", ".join(f"{k} {v:.0f}" for k, v in med.items()))
    for mine in ("cairnfs", "cairnfs-batch"):
        for other in ("mount", "juicefs"):
            if other in med and mine in med:
                print(f"  {mine} / {other}: {med[mine] / med[other]:.2f}x (median of {len(results[other])})")
    print(json.dumps({"median_files_per_s": med, "results": results}))

if __name__ == "__main__":
    main()
