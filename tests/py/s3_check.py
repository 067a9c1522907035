"""What the S3 table tests ask of the store through other clients than ingest's.

    s3_check.py uploads PREFIX        open multipart uploads under PREFIX, one key per line
    s3_check.py types PREFIX          the Content-Type of each data object under PREFIX (not
                                      under _ingest/), one per line
    s3_check.py read PREFIX FORMAT    pyarrow reads s3://BUCKET/PREFIX as a Hive-partitioned
                                      dataset: prints {"rows": N, "amount": SUM}

The store comes from INGEST_TEST_S3_ENDPOINT, _BUCKET, _KEY_ID and _SECRET (.ci/s3-store).
"""
import json
import os
import sys
from urllib.parse import urlparse

endpoint = os.environ["INGEST_TEST_S3_ENDPOINT"]
bucket = os.environ["INGEST_TEST_S3_BUCKET"]
key_id = os.environ["INGEST_TEST_S3_KEY_ID"]
secret = os.environ["INGEST_TEST_S3_SECRET"]


def boto():
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


def uploads(prefix):
    s3 = boto()
    listed = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix)
    for upload in listed.get("Uploads", []):
        print(upload["Key"])


def types(prefix):
    s3 = boto()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if "/_ingest/" not in item["Key"]:
                print(s3.head_object(Bucket=bucket, Key=item["Key"])["ContentType"])


def read(prefix, fmt):
    import pyarrow.dataset as ds
    import pyarrow.compute as pc
    from pyarrow import fs

    url = urlparse(endpoint)
    s3 = fs.S3FileSystem(
        access_key=key_id,
        secret_key=secret,
        endpoint_override=url.netloc,
        scheme=url.scheme,
        region="us-east-1",
    )
    data = ds.dataset(
        f"{bucket}/{prefix}",
        filesystem=s3,
        format=fmt,
        partitioning="hive",
        # Readers skip what ingest hides: its state, staging and rejects.
        ignore_prefixes=["_", "."],
    )
    table = data.to_table()
    amount = pc.sum(pc.cast(table["amount"], "double")).as_py()
    print(json.dumps({"rows": table.num_rows, "amount": round(amount or 0.0, 2)}))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"uploads": uploads, "types": types, "read": read}[command](*args)
