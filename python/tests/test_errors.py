"""Errors reach Python as its own exceptions, with the library's message;
bad input and refused identities never crash the interpreter."""

import errno
import os
import subprocess
import sys
import time

import pytest

import cairnfs

REVOKE_WAIT_S = 30


def fresh(cluster, **kw):
    return cairnfs.CairnFileSystem(data_dir=cluster.data_dir, skip_instance_cache=True, timeout=20, **kw)


def test_error_mapping(fs, base):
    fs.pipe_file(f"{base}/file", b"x")
    fs.makedirs(f"{base}/dir/sub")
    cases = [
        (lambda: fs.info(f"{base}/missing"), FileNotFoundError, errno.ENOENT),
        (lambda: fs.makedirs(f"{base}/dir"), FileExistsError, errno.EEXIST),
        (lambda: fs.open(f"{base}/dir", "rb"), IsADirectoryError, errno.EISDIR),
        (lambda: fs.ls(f"{base}/file/below"), NotADirectoryError, errno.ENOTDIR),
        (lambda: fs.rmdir(f"{base}/dir"), OSError, errno.ENOTEMPTY),
        (lambda: fs.rm_file(f"{base}/dir"), IsADirectoryError, errno.EISDIR),
        (lambda: fs.cat_file(f"{base}/" + "n" * 300), OSError, errno.ENAMETOOLONG),
    ]
    for fn, exc, code in cases:
        with pytest.raises(exc) as e:
            fn()
        assert e.value.errno == code, e.value
        assert e.value.strerror and e.value.filename, e.value
    with pytest.raises(FileNotFoundError) as e:
        fs.info(f"{base}/missing")
    assert f"{base}/missing" in str(e.value)


def test_permission_error_for_another_user(cluster, base, fs):
    fs.pipe_file(f"{base}/private", b"secret")
    fs.chmod(f"{base}/private", 0o600)
    other = fresh(cluster, uid=4242, gid=4242, groups=[])
    with pytest.raises(PermissionError):
        other.cat_file(f"{base}/private")
    with pytest.raises(PermissionError):
        other.pipe_file(f"{base}/private", b"mine")


def test_missing_volume(cluster):
    with pytest.raises(FileNotFoundError, match='volume "novolume" does not exist'):
        fresh(cluster).ls("novolume/")


def test_no_volume_in_path(fs):
    with pytest.raises(ValueError, match="no volume"):
        fs.ls("")


def test_nul_in_path(fs, base):
    with pytest.raises(ValueError, match="NUL"):
        fs.info(f"{base}/a\x00b")
    with pytest.raises(ValueError, match="NUL"):
        fs.pipe_file(f"{base}/a\x00b", b"")


def test_no_cluster_configured(monkeypatch):
    for k in ("CAIRN_MASTER", "CAIRN_DATA_DIR"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(ValueError, match="where is the cluster"):
        cairnfs.CairnFileSystem(skip_instance_cache=True)


def test_no_master_answers(cluster):
    fs = cairnfs.CairnFileSystem(master="127.0.0.1:1", tls_dir=os.path.join(cluster.data_dir, "tls", "admin"),
                                 skip_instance_cache=True)
    start = time.monotonic()
    with pytest.raises(ConnectionRefusedError, match="no master"):
        fs.ls("default/")
    assert time.monotonic() - start < 10


def test_wrong_certificate(cluster, tmp_path):
    ca, out = tmp_path / "ca", tmp_path / "stranger"
    subprocess.run([cluster.binary, "cert", "ca", "--dir", str(ca)], check=True, capture_output=True, timeout=60)
    subprocess.run([cluster.binary, "cert", "issue", "--ca", str(ca), "--kind", "admin", "--name", "stranger",
                    "--out", str(out)], check=True, capture_output=True, timeout=60)
    start = time.monotonic()
    with pytest.raises(PermissionError, match="CA"):
        fresh(cluster, tls_dir=str(out)).ls("default/")
    assert time.monotonic() - start < 10
    with pytest.raises(OSError, match="TLS identity"):
        fresh(cluster, tls_dir=str(tmp_path / "nothing-here")).ls("default/")


def test_read_only_identity(cluster, fs, base, tmp_path_factory):
    fs.pipe_file(f"{base}/r", b"readable")
    _, tls = cluster.identity(tmp_path_factory, "--read-only")
    ro = fresh(cluster, tls_dir=tls)
    assert ro.cat_file(f"{base}/r") == b"readable"
    assert f"{base}/r" in ro.ls(base, detail=False)
    for fn in (lambda: ro.pipe_file(f"{base}/w", b"x"), lambda: ro.mkdir(f"{base}/d"),
               lambda: ro.rm(f"{base}/r"), lambda: ro.open(f"{base}/r", "ab")):
        with pytest.raises(OSError) as e:
            fn()
        assert e.value.errno == errno.EROFS, e.value
    assert fs.cat_file(f"{base}/r") == b"readable"


def test_revoked_identity(cluster, fs, base, tmp_path_factory):
    fs.pipe_file(f"{base}/r", b"before")
    name, tls = cluster.identity(tmp_path_factory)
    c = fresh(cluster, tls_dir=tls)
    assert c.cat_file(f"{base}/r") == b"before"
    cluster.cairn("client", "revoke", name)
    deadline = time.monotonic() + REVOKE_WAIT_S
    while True:  # every server refuses it within a heartbeat
        try:
            c.cat_file(f"{base}/r")
        except PermissionError as e:
            assert "revoked" in str(e)
            break
        assert time.monotonic() < deadline, "a revoked identity still reads"
        time.sleep(0.5)
    with pytest.raises(PermissionError):
        fresh(cluster, tls_dir=tls).ls(base)


def test_confined_identity(cluster, fs, base, tmp_path_factory):
    fs.pipe_file(f"{base}/inside/f", b"in")
    fs.makedirs(f"{base}/inside/sub")
    fs.pipe_file(f"{base}/outside", b"out")
    _, tls = cluster.identity(tmp_path_factory, "--path", "/" + base.split("/", 1)[1] + "/inside")
    c = fresh(cluster, tls_dir=tls)
    assert c.ls("default", detail=False) == ["default/f", "default/sub"]  # its "/" is the subtree
    assert c.info("default")["type"] == "directory"
    assert c.cat_file("default/f") == b"in"
    c.pipe_file("default/g", b"new")
    assert fs.cat_file(f"{base}/inside/g") == b"new"
    for p in ("default/../outside", "default/sub/../../outside", "default/.."):
        with pytest.raises(PermissionError, match="subtree"):
            c.cat_file(p) if not p.endswith("..") else c.ls(p)
    with pytest.raises(PermissionError, match="volume"):
        c.ls("othervolume/")


def test_bad_input_never_crashes_the_interpreter(cluster):
    # In a child interpreter: whatever happens, it must exit on its own
    # with an exception, not a signal.
    code = f"""
import cairnfs, sys
fs = cairnfs.CairnFileSystem(data_dir={cluster.data_dir!r}, skip_instance_cache=True)
bad = ["default/a\\x00b", "novol/x", "default/" + "x" * 5000, "default/\\udcff", "default/../..", ""]
for p in bad:
    for op in (fs.info, fs.ls, fs.cat_file, lambda p: fs.pipe_file(p, b"x"), fs.rm):
        try:
            op(p)
        except (OSError, ValueError) as e:
            pass
f = fs.open("default/crash-check", "wb")
f.close()
try:
    f.write(b"x")
except ValueError:
    pass
from cairnfs import _lib
import ctypes
try:
    _lib.call("cairn_file_pread", 987654, None, 10, 0)
except OSError as e:
    assert e.errno == 9, e
try:
    _lib.call("cairn_open", b"{{not json", path="x")
except OSError as e:
    assert e.errno == 22, e
h = fs._handle("default")
sizes = (ctypes.c_int64 * 4)()
out = ctypes.c_void_p()
for blob, n, sz in ((b"/a\\x00/b\\x00", 3, sizes), (b"/a\\x00/b", 2, sizes), (b"/a\\x00", -1, sizes),
                    (b"/a\\x00", 1 << 40, sizes), (None, 2, sizes), (b"/a\\x00", 1, None)):
    try:
        _lib.call("cairn_read_files", h, blob, len(blob or b"") + (5 if blob is None else 0), n, 0, sz,
                  ctypes.byref(out))
        raise AssertionError(f"cairn_read_files({{blob!r}}, {{n}}) did not fail")
    except OSError as e:
        assert e.errno == 22, e
got = _lib.call("cairn_read_files", h, b"/nope\\x00", 6, 1, 0, sizes, ctypes.byref(out))
assert got == 0 and sizes[0] == -2, (got, sizes[0])
print("survived")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "survived" in out.stdout
