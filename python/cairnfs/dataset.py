"""FileDataset: the files of a directory tree as a map-style dataset."""

from fsspec.core import url_to_fs

__all__ = ["FileDataset"]


class FileDataset:
    """The files under ``url`` whose paths (relative to it) match the glob
    ``pattern``, in sorted order: ``len(ds)`` is their number, ``ds[i]`` the
    bytes of the i-th. ``ds.paths`` lists them.

    It is what a PyTorch ``DataLoader`` takes as a map-style dataset
    (``__len__`` and ``__getitem__``) without this package importing torch;
    ``transform``, if given, is applied to the bytes (decode an image, parse
    a record). The list of files is made once, here.

    Worker processes: the Go runtime under cairnfs does not survive fork(),
    so give the DataLoader ``multiprocessing_context="spawn"`` (or
    "forkserver"); the dataset pickles as its url, pattern and options and
    connects again in each worker. Threads need nothing: reads release the
    GIL.
    """

    def __init__(self, url, pattern="**", transform=None, **storage_options):
        self.url, self.pattern, self.transform = url, pattern, transform
        self.storage_options = storage_options
        self.fs, root = url_to_fs(url, **storage_options)
        self.root = root.rstrip("/")
        found = self.fs.glob(self.root + "/" + pattern.lstrip("/"), detail=True)
        self.paths = sorted(p for p, info in found.items() if info["type"] == "file")

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self.paths)
        if not 0 <= index < len(self.paths):
            raise IndexError(f"FileDataset index {index} out of range ({len(self.paths)} files)")
        data = self.fs.cat_file(self.paths[index])
        return self.transform(data) if self.transform is not None else data

    def __getitems__(self, indices):
        """The items at ``indices``, read in one batch (``cat_files``): a
        PyTorch DataLoader with batching calls this instead of
        ``__getitem__`` once per index. A file that cannot be read raises
        its OSError, as ``__getitem__`` does."""
        paths = []
        for index in indices:
            if index < 0:
                index += len(self.paths)
            if not 0 <= index < len(self.paths):
                raise IndexError(f"FileDataset index {index} out of range ({len(self.paths)} files)")
            paths.append(self.paths[index])
        cat_files = getattr(self.fs, "cat_files", None)
        got = cat_files(paths) if cat_files else [self.fs.cat_file(p) for p in paths]
        items = []
        for data in got:
            if isinstance(data, Exception):
                raise data
            items.append(self.transform(data) if self.transform is not None else data)
        return items

    def __getstate__(self):
        # The file system object is made again on the other side (spawned
        # workers load the library afresh).
        return {"url": self.url, "pattern": self.pattern, "transform": self.transform,
                "storage_options": self.storage_options, "paths": self.paths, "root": self.root}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.fs, _ = url_to_fs(self.url, **self.storage_options)

    def __repr__(self):
        return f"FileDataset({self.url!r}, {self.pattern!r}: {len(self.paths)} files)"
