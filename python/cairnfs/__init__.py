"""cairnfs: Cairn's file system for Python, an fsspec implementation over
the Go client SDK's stateless path API (``cairn://VOLUME/path``).

    import fsspec
    fs = fsspec.filesystem("cairn", data_dir="./cairn-data")
    fs.pipe_file("default/hello.txt", b"hello")
    with fsspec.open("cairn://default/hello.txt", data_dir="./cairn-data") as f:
        f.read()

See docs/python.md in Cairn's repository.
"""

from fsspec import register_implementation

from .core import CairnFile, CairnFileSystem
from .dataset import FileDataset

__all__ = ["CairnFileSystem", "CairnFile", "FileDataset"]
__version__ = "0.1.0"

register_implementation("cairn", CairnFileSystem, clobber=True)
