"""Fixtures: a real Cairn cluster ('cairn up') for the whole test session.

The cluster runs from the repository's bin/cairn (CAIRN_BIN names another
binary) in a temporary data dir, with the volume mounted with FUSE at
<data-dir>/mnt when this host can mount. It is stopped by its PID at the
end (SIGTERM, then SIGKILL after a bounded wait).
"""

import os
import signal
import subprocess
import time
import uuid

import pytest

import cairnfs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UP_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
ADMIN_TIMEOUT_S = 60


class Cluster:
    def __init__(self, binary, data_dir, proc, log_path):
        self.binary, self.data_dir, self.proc, self.log_path = binary, data_dir, proc, log_path
        self.mount = os.path.join(data_dir, "mnt")

    def mounted(self):
        return os.path.ismount(self.mount)

    def cairn(self, *args):
        """Runs a cairn admin command against the cluster; returns stdout."""
        out = subprocess.run([self.binary, *args, "--data-dir", self.data_dir], capture_output=True,
                             text=True, timeout=ADMIN_TIMEOUT_S)
        if out.returncode != 0:
            raise RuntimeError(f"cairn {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def identity(self, tmp_path_factory, *flags):
        """Creates a client identity with flags (--read-only, --path ...);
        returns (name, directory)."""
        name = "py-" + uuid.uuid4().hex[:8]
        out = str(tmp_path_factory.mktemp(name))
        os.rmdir(out)
        self.cairn("client", "create", name, "--volume", "default", "--out", out, *flags)
        return name, out

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def _stop(proc):
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    binary = os.environ.get("CAIRN_BIN") or os.path.join(REPO, "bin", "cairn")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"no cairn binary at {binary}: run make build (or set CAIRN_BIN)")
    base = tmp_path_factory.mktemp("cairn")
    data_dir = str(base / "data")
    log_path = str(base / "up.log")
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "up", "--data-dir", data_dir, "--s3=false", "--log-level", "warn"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    c = Cluster(binary, data_dir, proc, log_path)
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while True:
            with open(log_path, errors="replace") as f:
                if "Cairn is up" in f.read():
                    break
            if proc.poll() is not None:
                pytest.fail(f"cairn up exited with {proc.returncode}:\n{c.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"cairn up not ready after {UP_TIMEOUT_S}s:\n{c.log_tail()}")
            time.sleep(0.2)
        yield c
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="session")
def fs(cluster):
    f = cairnfs.CairnFileSystem(data_dir=cluster.data_dir, skip_instance_cache=True)
    yield f
    f.close()


@pytest.fixture
def base(fs):
    """A fresh directory of the default volume for one test, removed after."""
    path = "default/t-" + uuid.uuid4().hex[:10]
    fs.makedirs(path)
    yield path
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass


@pytest.fixture
def cairn_env(cluster, monkeypatch):
    """CAIRN_DATA_DIR set: what fsspec.open("cairn://...") uses."""
    monkeypatch.setenv("CAIRN_DATA_DIR", cluster.data_dir)
    monkeypatch.delenv("CAIRN_MASTER", raising=False)
    monkeypatch.delenv("CAIRN_TLS_DIR", raising=False)
    return cluster.data_dir
