"""Build hook of cairnfs: compiles the Go client SDK into libcairn.so.

``pip install ./python`` (or ``make python``) runs ``go build
-buildmode=c-shared ./cmd/libcairn`` in the Cairn module this directory
belongs to (``CAIRN_SOURCE`` names another checkout) and puts the library
in the package. The wheel holds no Python extension, only the library: it is
tagged py3-none-<platform>.
"""

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
GO_BUILD_TIMEOUT_S = 1800  # a cold build of the SDK on 2 cores takes minutes


def module_root():
    candidates = [os.environ.get("CAIRN_SOURCE"), os.path.dirname(HERE)]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "go.mod")) and os.path.isdir(os.path.join(c, "cmd", "libcairn")):
            return c
    raise RuntimeError(
        "cairnfs: the Cairn Go module (go.mod and cmd/libcairn) is not next to this "
        "package; build from a checkout (pip install ./python) or set CAIRN_SOURCE"
    )


class BuildWithGoLibrary(build_py):
    def run(self):
        super().run()
        out_dir = os.path.abspath(os.path.join(self.build_lib, "cairnfs"))
        os.makedirs(out_dir, exist_ok=True)
        out = os.path.join(out_dir, "libcairn.so")
        go = os.environ.get("GO") or shutil.which("go")
        if not go:
            raise RuntimeError("cairnfs: the Go toolchain (go) is needed to build libcairn.so")
        env = dict(os.environ, CGO_ENABLED="1")
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/libcairn"]
        print("cairnfs: " + " ".join(cmd))
        subprocess.run(cmd, cwd=module_root(), env=env, check=True, timeout=GO_BUILD_TIMEOUT_S)


class BinaryDistribution(Distribution):
    """A distribution with a platform's binary (the library) in it."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildWithGoLibrary, "bdist_wheel": PlatformWheel})
