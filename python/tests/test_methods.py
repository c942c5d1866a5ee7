"""Every method of CairnFileSystem, on a real cluster."""

import datetime
import io
import os
import posixpath
import threading

import fsspec
import pytest

import cairnfs


def test_registered_for_the_cairn_protocol(cluster, cairn_env):
    assert fsspec.get_filesystem_class("cairn") is cairnfs.CairnFileSystem
    fs, path = fsspec.core.url_to_fs("cairn://default/some/file")
    assert isinstance(fs, cairnfs.CairnFileSystem)
    assert path == "default/some/file"


def test_ls_with_and_without_detail(fs, base):
    fs.pipe_file(f"{base}/b.txt", b"bb")
    fs.pipe_file(f"{base}/a.txt", b"a")
    fs.makedirs(f"{base}/d")
    assert fs.ls(base, detail=False) == [f"{base}/a.txt", f"{base}/b.txt", f"{base}/d"]
    infos = {i["name"]: i for i in fs.ls("cairn://" + base, detail=True)}
    assert infos[f"{base}/a.txt"]["size"] == 1 and infos[f"{base}/a.txt"]["type"] == "file"
    assert infos[f"{base}/b.txt"]["size"] == 2
    assert infos[f"{base}/d"]["type"] == "directory"
    # ls of a file is that file, as in every fsspec implementation.
    assert fs.ls(f"{base}/a.txt", detail=False) == [f"{base}/a.txt"]
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{base}/missing")


def test_info_exists_and_types(fs, base):
    fs.pipe_file(f"{base}/f", b"12345")
    i = fs.info(f"{base}/f")
    assert (i["name"], i["size"], i["type"]) == (f"{base}/f", 5, "file")
    assert fs.info(base)["type"] == "directory"
    assert fs.info("default")["type"] == "directory"  # the volume's root
    assert fs.exists(f"{base}/f") and not fs.exists(f"{base}/nope")
    assert fs.isfile(f"{base}/f") and fs.isdir(base) and not fs.isdir(f"{base}/f")
    assert fs.size(f"{base}/f") == 5


def test_open_modes_and_seek(fs, base):
    p = f"{base}/data.bin"
    with fs.open(p, "wb") as f:
        f.write(b"0123456789")
    with fs.open(p, "rb") as f:
        assert f.read(3) == b"012"
        f.seek(-2, io.SEEK_END)
        assert f.read() == b"89"
        f.seek(4)
        assert f.tell() == 4 and f.read(2) == b"45"
    with fs.open(p, "ab") as f:
        f.write(b"ab")
    assert fs.cat_file(p) == b"0123456789ab"
    with fs.open(p, "r+b") as f:
        f.seek(2)
        f.write(b"XY")
        f.seek(0)
        assert f.read() == b"01XY456789ab"
    with fs.open(f"{base}/new.bin", "xb") as f:
        f.write(b"new")
    with pytest.raises(FileExistsError):
        fs.open(f"{base}/new.bin", "xb")
    with fs.open(p, "w") as f:  # text mode through fsspec's wrapper
        f.write("héllo\n")
    with fs.open(p, "r") as f:
        assert f.read() == "héllo\n"
    with pytest.raises(FileNotFoundError):
        fs.open(f"{base}/missing", "rb")


def test_large_file_round_trip(fs, base):
    data = os.urandom(9 << 20)  # more than one 4 MiB block of the buffered file
    with fs.open(f"{base}/big", "wb") as f:
        f.write(data)
    assert fs.cat_file(f"{base}/big") == data
    with fs.open(f"{base}/big", "rb", block_size=1 << 20) as f:
        f.seek(5 << 20)
        assert f.read(1000) == data[5 << 20:(5 << 20) + 1000]


def test_cat_file_ranges(fs, base):
    p = f"{base}/r"
    fs.pipe_file(p, b"0123456789")
    assert fs.cat_file(p, start=2, end=5) == b"234"
    assert fs.cat_file(p, start=7) == b"789"
    assert fs.cat_file(p, start=-3) == b"789"
    assert fs.cat_file(p, end=-8) == b"01"
    assert fs.cat_file(p, start=20) == b""
    assert fs.cat_file(p, start=8, end=100) == b"89"
    assert fs.cat(p) == b"0123456789"


def test_cat_many_in_batches(fs, base, monkeypatch):
    monkeypatch.setattr(cairnfs.core, "BATCH_FILES", 3)  # several library calls
    want = {f"{base}/many/f{i}": f"file {i}".encode() * (i + 1) for i in range(8)}
    for p, data in want.items():
        fs.pipe_file(p, data)
    fs.pipe_file(f"{base}/many/empty", b"")
    assert fs.cat(list(want)) == want
    assert fs.cat(f"{base}/many/f*") == want
    assert fs.cat([f"{base}/many/empty"]) == {f"{base}/many/empty": b""}
    missing, directory = f"{base}/many/nope", f"{base}/many"
    got = fs.cat_files([f"{base}/many/f1", missing, directory, f"{base}/many/f2"])
    assert got[0] == want[f"{base}/many/f1"] and got[3] == want[f"{base}/many/f2"]
    assert isinstance(got[1], FileNotFoundError) and got[1].filename == missing
    assert isinstance(got[2], IsADirectoryError)
    with pytest.raises(FileNotFoundError):
        fs.cat([f"{base}/many/f1", missing])
    assert fs.cat([f"{base}/many/f1", missing], on_error="omit") == {f"{base}/many/f1": want[f"{base}/many/f1"]}
    returned = fs.cat([f"{base}/many/f1", missing], on_error="return")
    assert isinstance(returned[missing], FileNotFoundError)
    assert fs.cat_files([]) == []
    with pytest.raises(ValueError):
        fs.cat_files([f"{base}/many/bad\0name"])


def test_pipe_file_modes(fs, base):
    p = f"{base}/p"
    fs.pipe_file(p, b"one")
    fs.pipe_file(p, b"two")
    assert fs.cat_file(p) == b"two"
    with pytest.raises(FileExistsError):
        fs.pipe_file(p, b"three", mode="create")
    fs.pipe_file(f"{base}/deep/er/p", b"x")  # parents made on write
    assert fs.cat_file(f"{base}/deep/er/p") == b"x"


def test_put_and_get(fs, base, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"A")
    (src / "sub" / "b.txt").write_bytes(b"B")
    fs.put(str(src), f"{base}/up", recursive=True)
    assert fs.cat_file(f"{base}/up/a.txt") == b"A"
    assert fs.cat_file(f"{base}/up/sub/b.txt") == b"B"
    dst = tmp_path / "down"
    fs.get(f"{base}/up", str(dst), recursive=True)
    assert (dst / "sub" / "b.txt").read_bytes() == b"B"
    fs.put_file(str(src / "a.txt"), f"{base}/one.txt")
    fs.get_file(f"{base}/one.txt", str(tmp_path / "one.txt"))
    assert (tmp_path / "one.txt").read_bytes() == b"A"


def test_mkdir_makedirs_rmdir(fs, base):
    fs.mkdir(f"{base}/x/y/z")  # create_parents=True by default
    assert fs.isdir(f"{base}/x/y/z")
    with pytest.raises(FileExistsError):
        fs.mkdir(f"{base}/x")
    with pytest.raises(FileNotFoundError):
        fs.mkdir(f"{base}/no/parent", create_parents=False)
    fs.makedirs(f"{base}/x/y/z", exist_ok=True)
    with pytest.raises(FileExistsError):
        fs.makedirs(f"{base}/x/y/z")
    fs.pipe_file(f"{base}/file", b"")
    with pytest.raises(NotADirectoryError):
        fs.makedirs(f"{base}/file/sub", exist_ok=True)
    with pytest.raises(OSError) as e:
        fs.rmdir(f"{base}/x")
    assert e.value.errno == 39  # ENOTEMPTY
    fs.rmdir(f"{base}/x/y/z")
    assert not fs.exists(f"{base}/x/y/z")


def test_rm(fs, base):
    fs.pipe_file(f"{base}/t/a", b"1")
    fs.pipe_file(f"{base}/t/s/b", b"2")
    fs.pipe_file(f"{base}/g1.log", b"")
    fs.pipe_file(f"{base}/g2.log", b"")
    with pytest.raises(IsADirectoryError):
        fs.rm(f"{base}/t")
    fs.rm(f"{base}/t/a")
    assert not fs.exists(f"{base}/t/a")
    fs.rm(f"{base}/t", recursive=True)
    assert not fs.exists(f"{base}/t")
    fs.rm(f"{base}/g*.log")
    assert fs.ls(base) == []
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{base}/gone")


def test_mv(fs, base):
    fs.pipe_file(f"{base}/a", b"A")
    fs.mv(f"{base}/a", f"{base}/b")
    assert not fs.exists(f"{base}/a") and fs.cat_file(f"{base}/b") == b"A"
    fs.makedirs(f"{base}/dir")
    fs.mv(f"{base}/b", f"{base}/dir")  # into an existing directory
    assert fs.cat_file(f"{base}/dir/b") == b"A"
    fs.mv(f"{base}/dir", f"{base}/dir2")  # a whole directory, one rename
    assert fs.cat_file(f"{base}/dir2/b") == b"A"
    with pytest.raises(FileNotFoundError):
        fs.mv(f"{base}/nope", f"{base}/x")


def test_cp_file_and_copy(fs, base):
    data = os.urandom(5 << 20)
    fs.pipe_file(f"{base}/src", data)
    fs.cp_file(f"{base}/src", f"{base}/dst")
    assert fs.cat_file(f"{base}/dst") == data
    fs.pipe_file(f"{base}/tree/x", b"x")
    fs.copy(f"{base}/tree", f"{base}/tree2", recursive=True)
    assert fs.cat_file(f"{base}/tree2/x") == b"x"


def test_find_glob_du_walk(fs, base):
    for p, n in [("a/1.txt", 1), ("a/2.csv", 2), ("a/b/3.txt", 3), ("c/4.txt", 4)]:
        fs.pipe_file(f"{base}/{p}", b"x" * n)
    assert fs.find(base) == [f"{base}/a/1.txt", f"{base}/a/2.csv", f"{base}/a/b/3.txt", f"{base}/c/4.txt"]
    assert f"{base}/a/b" in fs.find(base, withdirs=True)
    assert fs.glob(f"{base}/**/*.txt") == [f"{base}/a/1.txt", f"{base}/a/b/3.txt", f"{base}/c/4.txt"]
    assert fs.glob(f"cairn://{base}/a/*.csv") == [f"{base}/a/2.csv"]
    assert fs.du(base) == 10
    assert fs.du(base, total=False)[f"{base}/c/4.txt"] == 4
    walked = {root: sorted(files) for root, _, files in fs.walk(base)}
    assert walked[f"{base}/a"] == ["1.txt", "2.csv"]


def test_modified_and_created(fs, base):
    before = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    fs.pipe_file(f"{base}/m", b"1")
    m = fs.modified(f"{base}/m")
    assert m.tzinfo is not None and before < m < before + datetime.timedelta(seconds=60)
    assert fs.created(f"{base}/m") <= m + datetime.timedelta(seconds=1)


def test_touch_chmod_symlink(fs, base):
    fs.touch(f"{base}/t")
    assert fs.cat_file(f"{base}/t") == b""
    fs.pipe_file(f"{base}/t", b"keep")
    fs.touch(f"{base}/t", truncate=False)
    assert fs.cat_file(f"{base}/t") == b"keep"
    fs.chmod(f"{base}/t", 0o600)
    assert fs.info(f"{base}/t")["mode"] & 0o777 == 0o600
    fs.symlink("t", f"{base}/link")
    i = fs.info(f"{base}/link")
    assert i["islink"] and i["destination"] == "t" and i["size"] == 4
    assert fs.cat_file(f"{base}/link") == b"keep"


def test_threads_read_in_parallel(fs, base):
    n = 64
    for i in range(n):
        fs.pipe_file(f"{base}/f{i}", bytes([i]) * 1000)
    got, errors = {}, []

    def work(k):
        try:
            for i in range(k, n, 8):
                got[i] = fs.cat_file(f"{base}/f{i}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert all(got[i] == bytes([i]) * 1000 for i in range(n))


def test_file_dataset(fs, base, cluster):
    for i in range(5):
        fs.pipe_file(f"{base}/ds/{i % 2}/s{i}.bin", f"sample {i}".encode())
    fs.pipe_file(f"{base}/ds/readme.md", b"not a sample")
    ds = cairnfs.FileDataset(f"cairn://{base}/ds", "**/*.bin", data_dir=cluster.data_dir)
    assert len(ds) == 5
    assert sorted(ds[i] for i in range(len(ds))) == [f"sample {i}".encode() for i in range(5)]
    assert ds[-1] == ds[len(ds) - 1]
    with pytest.raises(IndexError):
        ds[5]
    decoded = cairnfs.FileDataset(f"cairn://{base}/ds", "*/*.bin", transform=bytes.decode,
                                  data_dir=cluster.data_dir)
    assert decoded[0].startswith("sample")
    import pickle
    again = pickle.loads(pickle.dumps(ds))
    assert again.paths == ds.paths and again[0] == ds[0]
    assert all(posixpath.basename(p).endswith(".bin") for p in ds.paths)
    # A DataLoader with batching calls __getitems__ once per batch.
    assert ds.__getitems__([4, 0, -1]) == [ds[4], ds[0], ds[4]]
    assert decoded.__getitems__([1]) == [decoded[1]]
    with pytest.raises(IndexError):
        ds.__getitems__([0, 5])
    fs.rm(ds.paths[2])
    with pytest.raises(FileNotFoundError):
        ds.__getitems__([1, 2])
