"""Data tools through cairn://: pyarrow and pandas, checked against the
bytes the FUSE mount of the same volume shows."""

import hashlib
import os
import time

import fsspec
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pd = pytest.importorskip("pandas")

MOUNT_WAIT_S = 30


def mount_path(cluster, path):
    """The mount's name for fsspec path VOLUME/..., waiting for the mount."""
    deadline = time.monotonic() + MOUNT_WAIT_S
    while not cluster.mounted():
        if time.monotonic() > deadline:
            pytest.skip(f"the volume is not mounted at {cluster.mount} (no FUSE here?)")
        time.sleep(0.5)
    return os.path.join(cluster.mount, path.split("/", 1)[1])


def test_parquet_written_through_cairn_reads_back_and_matches_the_mount(cluster, fs, base, cairn_env):
    table = pa.table({
        "id": pa.array(range(10_000), pa.int64()),
        "name": pa.array([f"row-{i}" for i in range(10_000)]),
        "score": pa.array([i * 0.5 for i in range(10_000)]),
    })
    url = f"cairn://{base}/t.parquet"
    pq.write_table(table, url, filesystem=fs)
    back = pq.read_table(url, filesystem=fs)
    assert back.equals(table)
    # Through fsspec's URL handling alone (configuration from CAIRN_DATA_DIR).
    with fsspec.open(url, "rb") as f:
        assert pq.read_table(f).equals(table)
    seen = fs.cat_file(url)
    with open(mount_path(cluster, f"{base}/t.parquet"), "rb") as f:
        mounted = f.read()
    assert hashlib.sha256(mounted).hexdigest() == hashlib.sha256(seen).hexdigest()
    assert pq.read_table(mount_path(cluster, f"{base}/t.parquet")).equals(table)


def test_pandas_read_csv_from_a_cairn_url(fs, cairn_env):
    fs.pipe_file("default/x.csv", b"a,b\n1,x\n2,y\n3,z\n")
    try:
        df = pd.read_csv("cairn://default/x.csv")
        assert list(df.columns) == ["a", "b"]
        assert df["a"].tolist() == [1, 2, 3]
        df.assign(c=df["a"] * 2).to_csv("cairn://default/x2.csv", index=False)
        assert pd.read_csv("cairn://default/x2.csv")["c"].tolist() == [2, 4, 6]
    finally:
        for p in ("default/x.csv", "default/x2.csv"):
            if fs.exists(p):
                fs.rm(p)


def test_pandas_parquet_partitioned_dataset(fs, base, cairn_env):
    df = pd.DataFrame({"k": ["a", "a", "b"], "v": [1, 2, 3]})
    url = f"cairn://{base}/ds"
    df.to_parquet(url, partition_cols=["k"])
    assert sorted(fs.ls(f"{base}/ds", detail=False)) == [f"{base}/ds/k=a", f"{base}/ds/k=b"]
    back = pd.read_parquet(url).sort_values("v")
    assert back["v"].tolist() == [1, 2, 3]


def test_file_written_on_the_mount_reads_through_cairn(cluster, fs, base):
    data = os.urandom(300_000)
    with open(mount_path(cluster, f"{base}/from-mount.bin"), "wb") as f:
        f.write(data)
    assert fs.cat_file(f"{base}/from-mount.bin") == data
