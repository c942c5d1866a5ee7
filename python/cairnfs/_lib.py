"""The ctypes binding of libcairn, the Go client SDK built as a C library.

Every call goes through ``call``: it passes an error slot, turns a negative
result into the OSError subclass Python gives that errno (FileNotFoundError,
FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError, or
OSError with ``.errno``) carrying the library's message, and frees what the
library allocated.

The library is loaded with ``ctypes.CDLL``, which releases the GIL for the
whole of every foreign call (``ctypes.PyDLL`` would hold it): while one
thread waits for a meta or data node, the others run Python or make calls of
their own, so a data loader's worker threads read files in parallel.
"""

import ctypes
import os
import threading

__all__ = ["Attr", "call", "lib", "take_bytes"]

_LIB_NAME = "libcairn.so"


class Attr(ctypes.Structure):
    """cairn_attr of cairn.h: stat(2)'s view of a file."""

    _fields_ = [
        ("ino", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("mode", ctypes.c_uint32),
        ("nlink", ctypes.c_uint32),
        ("uid", ctypes.c_uint32),
        ("gid", ctypes.c_uint32),
        ("atime_ns", ctypes.c_int64),
        ("mtime_ns", ctypes.c_int64),
        ("ctime_ns", ctypes.c_int64),
        ("btime_ns", ctypes.c_int64),
    ]


_I64 = ctypes.c_int64
_STR = ctypes.c_char_p
_ERR = ctypes.POINTER(ctypes.c_void_p)  # char **err
_OUT = ctypes.POINTER(ctypes.c_void_p)  # char **out
_BUF = ctypes.c_void_p
_U32 = ctypes.c_uint32
_INT = ctypes.c_int

# name -> argument types; every function returns int64.
_SIGNATURES = {
    "cairn_open": [_STR, _ERR],
    "cairn_close": [_I64, _ERR],
    "cairn_stat": [_I64, _STR, _INT, ctypes.POINTER(Attr), _ERR],
    "cairn_mkdir": [_I64, _STR, _U32, _ERR],
    "cairn_makedirs": [_I64, _STR, _U32, _INT, _ERR],
    "cairn_rmdir": [_I64, _STR, _ERR],
    "cairn_unlink": [_I64, _STR, _ERR],
    "cairn_rename": [_I64, _STR, _STR, _ERR],
    "cairn_symlink": [_I64, _STR, _STR, _ERR],
    "cairn_readlink": [_I64, _STR, _OUT, _ERR],
    "cairn_truncate": [_I64, _STR, _I64, _ERR],
    "cairn_chmod": [_I64, _STR, _U32, _ERR],
    "cairn_listdir": [_I64, _STR, _INT, _OUT, _ERR],
    "cairn_rmtree": [_I64, _STR, _ERR],
    "cairn_file_open": [_I64, _STR, _INT, _U32, _ERR],
    "cairn_file_pread": [_I64, _BUF, _I64, _I64, _ERR],
    "cairn_file_pwrite": [_I64, _BUF, _I64, _I64, _ERR],
    "cairn_file_size": [_I64, _ERR],
    "cairn_file_flush": [_I64, _ERR],
    "cairn_file_truncate": [_I64, _I64, _ERR],
    "cairn_file_close": [_I64, _ERR],
    "cairn_read_file": [_I64, _STR, _I64, _I64, _OUT, _ERR],
    "cairn_read_files": [_I64, _BUF, _I64, _I64, _I64, ctypes.POINTER(ctypes.c_int64), _OUT, _ERR],
    "cairn_write_file": [_I64, _STR, _BUF, _I64, _U32, _INT, _ERR],
    "cairn_copy": [_I64, _STR, _STR, _ERR],
}

_lock = threading.Lock()
_lib = None
_forked = False


def _after_fork_in_child():
    # The Go runtime does not survive fork(): its threads are gone in the
    # child, and the first call would hang. Say so instead.
    global _forked
    if _lib is not None:
        _forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _path():
    env = os.environ.get("CAIRN_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


def lib():
    """The loaded library (loaded on first use)."""
    global _lib
    if _forked:
        raise RuntimeError(
            "cairnfs was loaded before this process was forked, and the Go "
            "runtime under it does not survive fork(): start worker processes "
            "with the 'spawn' or 'forkserver' method (for a PyTorch DataLoader: "
            "multiprocessing_context='spawn'), or use threads"
        )
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _path()
            if not os.path.exists(path):
                raise ImportError(
                    f"cairnfs: {path} is missing: install the package with pip "
                    "(it builds the library with Go), or set CAIRN_LIBRARY"
                )
            dll = ctypes.CDLL(path)  # CDLL: the GIL is released during calls
            for name, args in _SIGNATURES.items():
                fn = getattr(dll, name)
                fn.argtypes = args
                fn.restype = _I64
            dll.cairn_free.argtypes = [ctypes.c_void_p]
            dll.cairn_free.restype = None
            _lib = dll
    return _lib


def take_bytes(ptr, n):
    """The n bytes at ptr (allocated by the library), freed after copying."""
    if not ptr:
        return b""
    try:
        return ctypes.string_at(ptr, n)
    finally:
        lib().cairn_free(ptr)


def call(name, *args, path=None, path2=None):
    """Calls library function name with args and an error slot.

    Returns its non-negative result; raises the OSError of a negative one,
    with the library's message and path (and path2) as file names.
    """
    err = ctypes.c_void_p()
    fn = getattr(lib(), name)
    ret = fn(*args, ctypes.byref(err))
    if ret >= 0:
        return ret
    msg = _message(err.value)
    code = int(-ret)
    if path2 is not None:
        raise OSError(code, msg, path, None, path2)
    if path is not None:
        raise OSError(code, msg, path)
    raise OSError(code, msg)


def _message(ptr):
    if not ptr:
        return "unknown error"
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib().cairn_free(ptr)

