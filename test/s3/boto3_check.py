#!/usr/bin/env python3
"""Checks a Cairn S3 gateway with boto3, as a user's script would.

Run with the gateway's variables in the environment, as 'cairn up' writes
them:  set -a; . cairn-data/s3.env; set +a; python3 test/s3/boto3_check.py
The endpoint is passed explicitly too, for boto3 releases older than
AWS_ENDPOINT_URL support (Debian 12 ships 1.26). Exits 0 when every check
passes; prints what failed otherwise.
"""
import hashlib
import io
import os
import sys
import urllib.error
import urllib.request

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

BUCKET = "boto3-check-%d" % os.getpid()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    # SigV4 for presigned URLs too (older boto3 presigns with SigV2).
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                      region_name=os.environ.get("AWS_REGION", "us-east-1"),
                      config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))
    s3.create_bucket(Bucket=BUCKET)
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        fail("the new bucket is not listed")

    big = bytes((i * 7) % 256 for i in range(5 * 1024 * 1024 + 1))
    objects = {"empty": b"", "one": b"x", "dir/a.txt": b"hello", "big.bin": big}
    cfg = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
    for key, data in objects.items():
        s3.upload_fileobj(io.BytesIO(data), BUCKET, key, Config=cfg,
                          ExtraArgs={"Metadata": {"origin": "boto3"}, "ContentType": "text/plain"})
    for key, data in objects.items():
        got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        if got != data:
            fail(f"{key}: read {len(got)} bytes, wrote {len(data)}")
        head = s3.head_object(Bucket=BUCKET, Key=key)
        if head["ContentLength"] != len(data) or head["Metadata"].get("origin") != "boto3":
            fail(f"{key}: head {head['ContentLength']} bytes, metadata {head['Metadata']}")
        if key != "big.bin" and head["ETag"].strip('"') != hashlib.md5(data).hexdigest():
            fail(f"{key}: ETag {head['ETag']} is not the MD5 of its bytes")
    if not s3.head_object(Bucket=BUCKET, Key="big.bin")["ETag"].strip('"').endswith("-2"):
        fail("big.bin was not uploaded in two parts")

    part = s3.get_object(Bucket=BUCKET, Key="big.bin", Range="bytes=10-19")["Body"].read()
    if part != big[10:20]:
        fail("ranged GET returned other bytes")

    listing = s3.list_objects_v2(Bucket=BUCKET, Delimiter="/")
    keys = sorted(o["Key"] for o in listing.get("Contents", []))
    prefixes = [p["Prefix"] for p in listing.get("CommonPrefixes", [])]
    if keys != ["big.bin", "empty", "one"] or prefixes != ["dir/"]:
        fail(f"listing with a delimiter: keys {keys}, prefixes {prefixes}")

    s3.copy_object(Bucket=BUCKET, Key="copy", CopySource={"Bucket": BUCKET, "Key": "dir/a.txt"})
    if s3.get_object(Bucket=BUCKET, Key="copy")["Body"].read() != b"hello":
        fail("copy differs from its source")

    url = s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "one"}, ExpiresIn=300)
    if urllib.request.urlopen(url).read() != b"x":
        fail("presigned GET returned other bytes")
    try:
        urllib.request.urlopen(url.replace("Signature=", "Signature=0"))
        fail("a tampered presigned URL was accepted")
    except urllib.error.HTTPError as e:
        if e.code != 403:
            fail(f"a tampered presigned URL: status {e.code}, want 403")

    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in list(objects) + ["copy"]]})
    left = s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    if left:
        fail(f"{len(left)} objects left after deleting all")
    s3.delete_bucket(Bucket=BUCKET)
    print("boto3: all checks passed")


if __name__ == "__main__":
    main()
