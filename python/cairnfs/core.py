"""CairnFileSystem: fsspec's interface over Cairn's stateless path API.

A path is ``VOLUME/path/inside`` (``cairn://VOLUME/path/inside`` with the
protocol): the first component names the volume, the rest is the path in
it. One file system object talks to one cluster with one identity and
opens each volume it is asked for once (a handle of the Go library).
"""

import ctypes
import datetime
import io
import json
import os
import posixpath
import stat as _stat
import threading

from fsspec.spec import AbstractFileSystem
from fsspec.utils import stringify_path

from . import _lib

__all__ = ["CairnFileSystem", "CairnFile"]

# open(2) flags (Linux values, as the library takes them).
O_RDONLY, O_WRONLY, O_RDWR = os.O_RDONLY, os.O_WRONLY, os.O_RDWR
O_CREAT, O_EXCL, O_TRUNC, O_APPEND = os.O_CREAT, os.O_EXCL, os.O_TRUNC, os.O_APPEND

# mode -> (flags, what io class buffers the raw file)
_MODES = {
    "rb": (O_RDONLY, io.BufferedReader),
    "wb": (O_WRONLY | O_CREAT | O_TRUNC, io.BufferedWriter),
    "xb": (O_WRONLY | O_CREAT | O_EXCL, io.BufferedWriter),
    "ab": (O_WRONLY | O_CREAT | O_APPEND, io.BufferedWriter),
    "r+b": (O_RDWR, io.BufferedRandom),
    "w+b": (O_RDWR | O_CREAT | O_TRUNC, io.BufferedRandom),
}

DEFAULT_BLOCK_SIZE = 4 << 20
# cat_files: files per library call, and files of one call read at once.
BATCH_FILES = 1024
BATCH_PARALLEL = 16


def _read_umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# New files and directories get 0o666 and 0o777 less the process's umask,
# as open(2) and mkdir(2) give them (read once, at import).
_UMASK = _read_umask()
FILE_MODE = 0o666 & ~_UMASK
DIR_MODE = 0o777 & ~_UMASK


def _check_str(path):
    if "\x00" in path:
        raise ValueError(f"cairn: path {path!r} contains a NUL byte")
    return path.encode("utf-8", "surrogateescape")


def _kind(mode):
    if _stat.S_ISDIR(mode):
        return "directory"
    if _stat.S_ISREG(mode):
        return "file"
    return "other"


class CairnFileSystem(AbstractFileSystem):
    """fsspec file system for ``cairn://VOLUME/path``.

    Where the cluster is and who this client is, each from the first place
    that names it:

    - ``master``: "HOST:PORT[,HOST:PORT...]" or a list; else ``CAIRN_MASTER``;
      else the masters of the ``cairn up`` cluster in ``data_dir``.
    - ``tls_dir``: a client identity directory (ca.crt, tls.crt, tls.key,
      from ``cairn client create``); else ``CAIRN_TLS_DIR``; else the admin
      identity of the ``cairn up`` cluster in ``data_dir``.
    - ``data_dir``: a ``cairn up --data-dir``; else ``CAIRN_DATA_DIR``.
    - ``insecure``: plain text, for a cluster run with ``--insecure``.
    - ``uid``, ``gid``, ``groups``: the identity permissions are checked
      for (default: this process's).
    - ``timeout``: seconds one call may take (default 30).
    - ``auto_mkdir``: writing a file creates its missing parent directories
      (default True, as object stores behave; False: FileNotFoundError).
    """

    protocol = "cairn"
    root_marker = ""
    sep = "/"

    def __init__(self, master=None, tls_dir=None, data_dir=None, insecure=False,
                 uid=None, gid=None, groups=None, timeout=30.0, auto_mkdir=True, **kwargs):
        super().__init__(**kwargs)
        self.auto_mkdir = auto_mkdir
        if master is None:
            master = os.environ.get("CAIRN_MASTER") or None
        if isinstance(master, str):
            master = [m for m in master.split(",") if m.strip()]
        if tls_dir is None:
            tls_dir = os.environ.get("CAIRN_TLS_DIR") or None
        if data_dir is None:
            data_dir = os.environ.get("CAIRN_DATA_DIR") or None
        if not master and not data_dir:
            raise ValueError(
                "cairn: where is the cluster? pass master='HOST:PORT' (or set "
                "CAIRN_MASTER), or data_dir= of a 'cairn up' cluster (or set CAIRN_DATA_DIR)"
            )
        self._config = {
            "masters": list(master or []),
            "tls_dir": os.fspath(tls_dir) if tls_dir else "",
            "data_dir": os.fspath(data_dir) if data_dir else "",
            "insecure": bool(insecure),
            "timeout_ms": int(timeout * 1000),
        }
        if uid is not None:
            self._config["uid"] = int(uid)
        if gid is not None:
            self._config["gid"] = int(gid)
        if groups is not None:
            self._config["groups"] = [int(g) for g in groups]
        self._handles = {}
        self._handles_lock = threading.Lock()

    # --- paths and volumes ------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path):
        path = stringify_path(path)
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        if path.startswith("cairn://"):
            path = path[len("cairn://"):]
        elif path.startswith("cairn::"):
            path = path[len("cairn::"):]
        return path.lstrip("/").rstrip("/")

    @staticmethod
    def _get_kwargs_from_urls(path):
        return {}

    def _split(self, path):
        """(volume, path inside the volume as bytes) of an fsspec path."""
        path = self._strip_protocol(path)
        volume, _, rest = path.partition("/")
        if not volume:
            raise ValueError(f"cairn: no volume in path {path!r}: want VOLUME/path (cairn://VOLUME/path)")
        _check_str(volume)
        return volume, _check_str("/" + rest)

    def _handle(self, volume):
        h = self._handles.get(volume)
        if h is not None:
            return h
        with self._handles_lock:
            h = self._handles.get(volume)
            if h is None:
                conf = dict(self._config, volume=volume)
                h = _lib.call("cairn_open", json.dumps(conf).encode(), path=volume)
                self._handles[volume] = h
        return h

    def _target(self, path):
        """(handle, path bytes, stripped fsspec path) of path."""
        volume, p = self._split(path)
        return self._handle(volume), p, self._strip_protocol(path)

    def _creating(self, path, fn):
        """fn(), and again after creating path's parent directories when it
        fails for want of one (with auto_mkdir)."""
        try:
            return fn()
        except FileNotFoundError:
            parent = self._parent(path)
            if not self.auto_mkdir or parent == self._strip_protocol(path) or "/" not in parent:
                raise
            self.makedirs(parent, exist_ok=True)
            return fn()

    def close(self):
        """Closes every volume this object opened (open files first)."""
        with self._handles_lock:
            handles, self._handles = self._handles, {}
        for volume, h in handles.items():
            _lib.call("cairn_close", h, path=volume)

    # --- metadata -----------------------------------------------------------

    def _stat(self, path, follow=True):
        h, p, name = self._target(path)
        a = _lib.Attr()
        _lib.call("cairn_stat", h, p, 1 if follow else 0, ctypes.byref(a), path=name)
        return a

    def _info_of(self, name, a, link=None):
        info = {
            "name": name,
            "size": a.size if not _stat.S_ISDIR(a.mode) else 0,
            "type": _kind(a.mode),
            "mode": a.mode,
            "ino": a.ino,
            "nlink": a.nlink,
            "uid": a.uid,
            "gid": a.gid,
            "mtime": a.mtime_ns / 1e9,
            "ctime": a.ctime_ns / 1e9,
            "created": a.btime_ns / 1e9,
            "islink": link is not None,
        }
        if link is not None:
            info["destination"] = link
        return info

    def info(self, path, **kwargs):
        name = self._strip_protocol(path)
        a = self._stat(path, follow=False)
        link = None
        if _stat.S_ISLNK(a.mode):
            h, p, _ = self._target(path)
            out = ctypes.c_void_p()
            n = _lib.call("cairn_readlink", h, p, ctypes.byref(out), path=name)
            link = _lib.take_bytes(out.value, n).decode("utf-8", "surrogateescape")
            try:
                a = self._stat(path, follow=True)
            except FileNotFoundError:
                pass  # a dangling link: its own attributes
        return self._info_of(name, a, link)

    def ls(self, path, detail=True, **kwargs):
        name = self._strip_protocol(path)
        h, p, _ = self._target(path)
        out = ctypes.c_void_p()
        try:
            n = _lib.call("cairn_listdir", h, p, 1 if detail else 0, ctypes.byref(out), path=name)
        except NotADirectoryError:
            info = self.info(path)
            return [info] if detail else [info["name"]]
        entries = json.loads(_lib.take_bytes(out.value, n))
        results = []
        for e in sorted(entries, key=lambda e: e["name"]):
            full = posixpath.join(name, e["name"])
            if not detail:
                results.append(full)
                continue
            mode = e["mode"] if e["detail"] else e["type"]
            info = {
                "name": full,
                "size": e["size"] if _stat.S_ISREG(mode) else 0,
                "type": _kind(mode),
                "mode": mode,
                "ino": e["ino"],
                "nlink": e["nlink"],
                "uid": e["uid"],
                "gid": e["gid"],
                "mtime": e["mtime_ns"] / 1e9,
                "islink": _stat.S_ISLNK(e["type"]),
            }
            if e.get("link"):
                info["destination"] = e["link"]
            results.append(info)
        return results

    def exists(self, path, **kwargs):
        try:
            self._stat(path, follow=True)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def modified(self, path):
        a = self._stat(path)
        return datetime.datetime.fromtimestamp(a.mtime_ns / 1e9, tz=datetime.timezone.utc)

    def created(self, path):
        a = self._stat(path)
        return datetime.datetime.fromtimestamp(a.btime_ns / 1e9, tz=datetime.timezone.utc)

    def size(self, path):
        return self.info(path)["size"]

    # --- directories ----------------------------------------------------------

    def mkdir(self, path, create_parents=True, mode=DIR_MODE, **kwargs):
        h, p, name = self._target(path)
        if create_parents:
            if self.exists(path):
                raise FileExistsError(17, "mkdir: file exists", name)
            _lib.call("cairn_makedirs", h, p, mode, 1, path=name)
        else:
            _lib.call("cairn_mkdir", h, p, mode, path=name)

    def makedirs(self, path, exist_ok=False, mode=DIR_MODE):
        h, p, name = self._target(path)
        _lib.call("cairn_makedirs", h, p, mode, 1 if exist_ok else 0, path=name)

    def rmdir(self, path):
        h, p, name = self._target(path)
        _lib.call("cairn_rmdir", h, p, path=name)

    def rm_file(self, path):
        h, p, name = self._target(path)
        _lib.call("cairn_unlink", h, p, path=name)

    def _rm(self, path):
        if self.isdir(path):
            self.rmdir(path)
        else:
            self.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        if maxdepth is not None:
            return super().rm(path, recursive=recursive, maxdepth=maxdepth)
        paths = self.expand_path(path, recursive=False)
        for p in paths:
            h, vp, name = self._target(p)
            if recursive:
                _lib.call("cairn_rmtree", h, vp, path=name)
                continue
            a = self._stat(p, follow=False)
            if _stat.S_ISDIR(a.mode):
                raise IsADirectoryError(21, "rm: is a directory (use recursive=True)", name)
            _lib.call("cairn_unlink", h, vp, path=name)

    # --- moving and copying -------------------------------------------------------

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        single = isinstance(path1, str) and isinstance(path2, str) and not any(c in path1 for c in "*?[")
        if not single or maxdepth is not None:
            return super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
        v1, p1 = self._split(path1)
        v2, p2 = self._split(path2)
        if v1 != v2:
            return super().mv(path1, path2, recursive=True, **kwargs)
        name1, name2 = self._strip_protocol(path1), self._strip_protocol(path2)
        if self.isdir(path2):
            # As mv(1): into an existing directory.
            name2 = posixpath.join(name2, posixpath.basename(name1))
            _, p2 = self._split(name2)
        _lib.call("cairn_rename", self._handle(v1), p1, p2, path=name1, path2=name2)

    def cp_file(self, path1, path2, **kwargs):
        v1, p1 = self._split(path1)
        v2, p2 = self._split(path2)
        name1, name2 = self._strip_protocol(path1), self._strip_protocol(path2)
        a = self._stat(path1)
        if _stat.S_ISDIR(a.mode):
            self.makedirs(path2, exist_ok=True)
            return
        if v1 == v2:
            self._creating(path2, lambda: _lib.call("cairn_copy", self._handle(v1), p1, p2, path=name1, path2=name2))
            return
        with self.open(path1, "rb") as src, self.open(path2, "wb") as dst:
            while True:
                chunk = src.read(DEFAULT_BLOCK_SIZE)
                if not chunk:
                    break
                dst.write(chunk)

    # --- whole files ----------------------------------------------------------------

    def cat_file(self, path, start=None, end=None, **kwargs):
        h, p, name = self._target(path)
        if (start is not None and start < 0) or (end is not None and end < 0):
            size = self._stat(path).size
            if start is not None and start < 0:
                start = max(size + start, 0)
            if end is not None and end < 0:
                end = max(size + end, 0)
        out = ctypes.c_void_p()
        n = _lib.call("cairn_read_file", h, p, start or 0, -1 if end is None else end,
                      ctypes.byref(out), path=name)
        return _lib.take_bytes(out.value, n)

    def cat(self, path, recursive=False, on_error="raise", **kwargs):
        """fsspec's ``cat``; several paths are read by the library in
        batches (``cat_files``), not one call each."""
        if kwargs.get("start") is not None or kwargs.get("end") is not None:
            return super().cat(path, recursive=recursive, on_error=on_error, **kwargs)
        paths = self.expand_path(path, recursive=recursive, **kwargs)
        if len(paths) == 1 and not isinstance(path, list) and paths[0] == self._strip_protocol(path):
            return self.cat_file(paths[0])
        out = {}
        for p, got in zip(paths, self.cat_files(paths)):
            if isinstance(got, Exception):
                if on_error == "raise":
                    raise got
                if on_error == "return":
                    out[p] = got
            else:
                out[p] = got
        return out

    def cat_files(self, paths):
        """The whole contents of each of ``paths``, in order: bytes, or the
        OSError (FileNotFoundError, IsADirectoryError, ...) of a file that
        could not be read. One library call reads up to ``BATCH_FILES``
        files of a volume, ``BATCH_PARALLEL`` at a time, in Go: a data
        loader's batch costs one crossing into the library and no Python
        thread per file."""
        results = [None] * len(paths)
        by_volume = {}
        for i, path in enumerate(paths):
            h, p, name = self._target(path)
            by_volume.setdefault(h, []).append((i, p, name))
        for h, items in by_volume.items():
            for k in range(0, len(items), BATCH_FILES):
                batch = items[k:k + BATCH_FILES]
                blob = b"".join(p + b"\0" for _, p, _ in batch)
                sizes = (ctypes.c_int64 * len(batch))()
                out = ctypes.c_void_p()
                total = _lib.call("cairn_read_files", h, blob, len(blob), len(batch), BATCH_PARALLEL,
                                  sizes, ctypes.byref(out))
                data = _lib.take_bytes(out.value, total)
                at = 0
                for (i, _, name), n in zip(batch, sizes):
                    if n < 0:
                        results[i] = OSError(-n, os.strerror(-n), name)
                    else:
                        results[i] = data[at:at + n]
                        at += n
        return results

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        if mode == "create":
            with self.open(path, "xb") as f:
                f.write(value)
            return
        h, p, name = self._target(path)
        data = bytes(value)
        buf = ctypes.c_char_p(data)
        self._creating(path, lambda: _lib.call("cairn_write_file", h, p, ctypes.cast(buf, ctypes.c_void_p),
                                               len(data), FILE_MODE, 0, path=name))

    def touch(self, path, truncate=True, **kwargs):
        if truncate or not self.exists(path):
            self.pipe_file(path, b"")
        else:
            h, p, name = self._target(path)
            # A write of nothing at the end sets no time: re-set the size.
            _lib.call("cairn_truncate", h, p, self._stat(path).size, path=name)

    def chmod(self, path, mode):
        h, p, name = self._target(path)
        _lib.call("cairn_chmod", h, p, mode, path=name)

    def symlink(self, target, path):
        h, p, name = self._target(path)
        _lib.call("cairn_symlink", h, _check_str(target), p, path=name)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if mode not in _MODES:
            raise ValueError(f"cairn: open mode {mode!r} is not supported (rb, wb, xb, ab, r+b, w+b)")
        flags, buffered = _MODES[mode]
        h, p, name = self._target(path)
        def open_():
            return _lib.call("cairn_file_open", h, p, flags, FILE_MODE, path=name)

        fh = self._creating(path, open_) if flags & O_CREAT else open_()
        raw = CairnFile(self, name, fh, mode)
        f = buffered(raw, buffer_size=block_size or DEFAULT_BLOCK_SIZE)
        return f


class CairnFile(io.RawIOBase):
    """An open file of a Cairn volume: unbuffered reads and writes at a
    position, one library call each (``fs.open`` wraps it in io's buffered
    classes). Writes reach other clients at flush() or close()."""

    def __init__(self, fs, path, fh, mode):
        super().__init__()
        self.fs, self.path, self.mode, self._fh = fs, path, mode, fh
        self._pos = 0
        self._closing = False
        self._append = mode == "ab"
        if self._append:
            self._pos = self._size()

    @property
    def name(self):
        return self.path

    def _size(self):
        return _lib.call("cairn_file_size", self._fh, path=self.path)

    @property
    def size(self):
        return self._size()

    def readable(self):
        return "r" in self.mode or "+" in self.mode

    def writable(self):
        return "r" not in self.mode or "+" in self.mode

    def seekable(self):
        return True

    def readinto(self, b):
        self._checkClosed()
        if not self.readable():
            raise io.UnsupportedOperation("read: file not open for reading")
        mv = memoryview(b).cast("B")
        n = len(mv)
        if n == 0:
            return 0
        if mv.readonly:
            raise TypeError("readinto needs a writable buffer")
        buf = (ctypes.c_char * n).from_buffer(mv)
        got = _lib.call("cairn_file_pread", self._fh, ctypes.addressof(buf), n, self._pos, path=self.path)
        self._pos += got
        return got

    def readall(self):
        self._checkClosed()
        n = max(self._size() - self._pos, 0)
        out = bytearray(n)
        got = self.readinto(out) if n else 0
        del out[got:]
        return bytes(out)

    def write(self, b):
        self._checkClosed()
        if not self.writable():
            raise io.UnsupportedOperation("write: file not open for writing")
        mv = memoryview(b).cast("B")
        n = len(mv)
        if n == 0:
            return 0
        if mv.readonly:
            data = ctypes.c_char_p(mv.tobytes())
            addr = ctypes.cast(data, ctypes.c_void_p)
        else:
            data = (ctypes.c_char * n).from_buffer(mv)
            addr = ctypes.addressof(data)
        got = _lib.call("cairn_file_pwrite", self._fh, addr, n, self._pos, path=self.path)
        self._pos = self._size() if self._append else self._pos + got
        return got

    def seek(self, offset, whence=io.SEEK_SET):
        self._checkClosed()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size() + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise OSError(22, "seek before the start of the file", self.path)
        self._pos = pos
        return pos

    def tell(self):
        self._checkClosed()
        return self._pos

    def truncate(self, size=None):
        self._checkClosed()
        size = self._pos if size is None else size
        _lib.call("cairn_file_truncate", self._fh, size, path=self.path)
        return size

    def flush(self):
        if not self.closed and not self._closing and self.writable():
            _lib.call("cairn_file_flush", self._fh, path=self.path)

    def close(self):
        if self.closed:
            return
        self._closing = True  # cairn_file_close flushes: no flush() before
        try:
            _lib.call("cairn_file_close", self._fh, path=self.path)
        finally:
            super().close()
