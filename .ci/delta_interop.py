#!/usr/bin/env python3
"""Interop check for Delta tables: readers that are not ours read what `ingest` wrote.

Usage: delta_interop.py INGEST_BINARY WORKDIR [s3://BUCKET/PREFIX]

The Delta project's Python package (`deltalake`) and polars (`read_delta`) read each
table through its log; the figures they must agree on are computed here from the
fixture files with Python's csv module, independently of ingest. With an s3:// prefix
the tables are written there, in the store `.ci/s3-store` started (its INGEST_TEST_S3_*
variables), and read from there.
"""
import collections, csv, datetime, decimal, glob, gzip, io, os, subprocess, sys

import deltalake
import polars as pl
from readback import check, finish, rows_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary, work = sys.argv[1], sys.argv[2]
base = sys.argv[3].rstrip("/") if len(sys.argv) > 3 else None
storage = None
if base:
    storage = {
        "AWS_ENDPOINT_URL": os.environ["INGEST_TEST_S3_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": os.environ["INGEST_TEST_S3_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["INGEST_TEST_S3_SECRET"],
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    os.environ.update(storage, INGEST_WORK_DIR=os.path.join(work, "s3-working-copy"))


def at(name):
    """Where table `name` goes: under the bucket's prefix, or in WORKDIR."""
    return f"{base}/{name}" if base else os.path.join(work, name)


def delta_table(table):
    return deltalake.DeltaTable(table, storage_options=storage)


def read_delta(table):
    return pl.read_delta(table, storage_options=storage)


def ingest(*args, check_exit=True):
    return subprocess.run([binary, *args], check=check_exit, capture_output=not check_exit)


orders = os.path.join(ROOT, "fixtures", "orders")
all_rows = [r for p in sorted(glob.glob(os.path.join(orders, "*"))) for r in rows_of(p)]
seen, expected = set(), []
for row in all_rows:
    if row["order_id"] not in seen:
        seen.add(row["order_id"])
        expected.append(row)
want = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for row in expected:
    want[row["country"]][0] += 1
    want[row["country"]][1] += decimal.Decimal(row["amount"])
want = sorted((c, n, s) for c, (n, s) in want.items())

# 1. The orders, typed, deduped, partitioned by country, one commit per 100 rows.
table = at("delta-orders")
ingest("--target", table, "--table-format", "delta", "--partition-by", "country",
       "--dedupe-key", "order_id", "--cast", "order_id=int", "--cast", "amount=decimal(12,2)",
       "--cast", "ts=timestamp", "--cast", "dt=date", "--checkpoint-rows", "100", "--quiet", orders)
dt = delta_table(table)
checkpoints = (len(all_rows) + 99) // 100  # a checkpoint every 100 rows read
# The first checkpoint's commit creates the table: versions 0 .. checkpoints - 1.
check("deltalake: one version per checkpoint, the first creating the table", dt.version(), checkpoints - 1)
check("deltalake: partition columns", dt.metadata().partition_columns, ["country"])
arrow = dt.to_pyarrow_table()
types = {f.name: str(f.type) for f in arrow.schema}
check("deltalake: promised types", {k: types[k] for k in ("order_id", "amount", "ts", "dt", "country", "note")},
      {"order_id": "int64", "amount": "decimal128(12, 2)", "ts": "timestamp[us, tz=UTC]",
       "dt": "date32[day]", "country": "string", "note": "string"})
got = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for country, amount in zip(arrow.column("country").to_pylist(), arrow.column("amount").to_pylist()):
    got[country][0] += 1
    got[country][1] += amount
check("deltalake: per-country count and sum(amount)", sorted((c, n, s) for c, (n, s) in got.items()), want)
check("deltalake: distinct order ids", len(set(arrow.column("order_id").to_pylist())), len(expected))
txn = getattr(dt, "transaction_version", None)
if txn is not None:
    check("deltalake: the job's txn version is its last checkpoint", txn("ingest:default"), checkpoints)

frame = read_delta(table)
check("polars: row count", frame.height, len(expected))
by = frame.group_by("country").agg(pl.len().alias("n"), pl.col("amount").sum().alias("s")).sort("country")
check("polars: per-country count and sum(amount)",
      [(c, n, decimal.Decimal(str(s)).quantize(decimal.Decimal("0.01"))) for c, n, s in by.iter_rows()],
      [(c, n, s.quantize(decimal.Decimal("0.01"))) for c, n, s in want])
check("polars: types", {k: str(frame.schema[k]) for k in ("order_id", "ts", "dt")},
      {"order_id": "Int64", "ts": "Datetime(time_unit='us', time_zone='UTC')", "dt": "Date"})

# 2. Nulls stay nulls: empty fields of typed columns, an empty partition value.
nulls_csv = os.path.join(work, "nulls.csv")
with open(nulls_csv, "w", newline="") as fh:
    fh.write("id,qty,price,day,flag,p\n1,3,1.25,2026-11-28,true,a\n2,,,,,\n3,5,,2026-11-30,false,a\n")
nulls = at("delta-nulls")
ingest("--target", nulls, "--table-format", "delta", "--partition-by", "p", "--cast", "id=int",
       "--cast", "qty=int", "--cast", "price=decimal(9,2)", "--cast", "day=date", "--cast", "flag=bool",
       "--quiet", nulls_csv)
rows = sorted(delta_table(nulls).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
check("deltalake: nulls as nulls (typed columns and the partition value)", rows, [
    {"id": 1, "qty": 3, "price": decimal.Decimal("1.25"), "day": datetime.date(2026, 11, 28), "flag": True, "p": "a"},
    {"id": 2, "qty": None, "price": None, "day": None, "flag": None, "p": None},
    {"id": 3, "qty": 5, "price": None, "day": datetime.date(2026, 11, 30), "flag": False, "p": "a"},
])
check("polars: nulls", read_delta(nulls).sort("id")["qty"].to_list(), [3, None, 5])

# 3. A crashed run: readers never see a checkpoint before its commit; recovery and abort
#    leave the log consistent for them.
crashed = at("delta-crashed")
env = dict(os.environ, INGEST_FAIL_POINT="delta.commit.before:3")
subprocess.run([binary, "--target", crashed, "--table-format", "delta", "--partition-by", "dt",
                "--checkpoint-rows", "100", "--quiet", orders], env=env, capture_output=True)
check("crash before the third commit: readers see two checkpoints",
      delta_table(crashed).to_pyarrow_table().num_rows, 200)
# A crashed load in a bucket holds its lease until it expires: wait for it.
ingest("--target", crashed, "--recover", "--lock-wait", "120", "--quiet")
check("after --recover: every row once", read_delta(crashed).height, len(all_rows))

aborted = at("delta-aborted")
env = dict(os.environ, INGEST_FAIL_POINT="checkpoint.committed.after:2")
subprocess.run([binary, "--target", aborted, "--table-format", "delta", "--checkpoint-rows", "100",
                "--quiet", orders], env=env, capture_output=True)
check("crash after two commits: readers see them", read_delta(aborted).height, 200)
ingest("--target", aborted, "--abort", "--lock-wait", "120", "--quiet")
check("after --abort: the run's rows are out of the table", read_delta(aborted).height, 0)

# 5. --compact (local tables): one OPTIMIZE commit merges each country's files; the new
# version has the same rows, and every older version still reads as it did.
if not base:
    dt = delta_table(table)
    last = dt.version()
    counts = {}
    for version in range(last + 1):
        old = delta_table(table)
        old.load_as_version(version)
        counts[version] = old.to_pyarrow_table().num_rows
    ingest("--target", table, "--compact", "--quiet")
    dt = delta_table(table)
    check("compact: one commit", dt.version(), last + 1)
    check("compact: its commit is an OPTIMIZE", dt.history(1)[0]["operation"], "OPTIMIZE")
    check("compact: one file per country", len(dt.file_uris()), len(want))
    arrow = dt.to_pyarrow_table()
    got = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
    for country, amount in zip(arrow.column("country").to_pylist(), arrow.column("amount").to_pylist()):
        got[country][0] += 1
        got[country][1] += amount
    check("compact: per-country count and sum(amount)", sorted((c, n, s) for c, (n, s) in got.items()), want)
    check("compact: polars row count", read_delta(table).height, len(expected))
    for version, rows in counts.items():
        old = delta_table(table)
        old.load_as_version(version)
        check(f"compact: version {version} still reads as before", old.to_pyarrow_table().num_rows, rows)

finish("delta interop" + (f" in {base}" if base else ""))
# Every check passed. deltalake 1.6's runtime threads can abort the interpreter's own
# exit ("terminate called without an active exception"), after all the work: leave
# without running it.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
