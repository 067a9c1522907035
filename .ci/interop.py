#!/usr/bin/env python3
"""Interop check: DuckDB reads what `ingest` wrote, and agrees with the input.

Usage: interop.py INGEST_BINARY WORKDIR

Expected figures are computed here from the fixture files with Python's csv module,
independently of ingest; DuckDB reads the committed table with hive_partitioning.
"""
import collections, csv, decimal, glob, gzip, io, os, subprocess, sys

import duckdb
from readback import check as _check, finish, rows_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary, work = sys.argv[1], sys.argv[2]


def check(what, got, want):
    _check(what, got, want, reader="duckdb says")


def ingest(*args):
    subprocess.run([binary, *args], check=True)


# 1. The orders fixtures, partitioned by two columns, deduped, small checkpoints.
table = os.path.join(work, "orders")
ingest("--target", table, "--partition-by", "dt,country", "--dedupe-key", "order_id",
       "--checkpoint-rows", "100", "--quiet", os.path.join(ROOT, "fixtures", "orders"))
seen, expected = set(), []
for path in sorted(glob.glob(os.path.join(ROOT, "fixtures", "orders", "*"))):
    for row in rows_of(path):
        if row["order_id"] not in seen:
            seen.add(row["order_id"])
            expected.append(row)
want = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for row in expected:
    key = (row["dt"], row["country"])
    want[key][0] += 1
    want[key][1] += decimal.Decimal(row["amount"])

rel = duckdb.sql(
    f"SELECT dt, country, count(*) AS n, sum(CAST(amount AS DECIMAL(18,2))) AS total, "
    f"count(DISTINCT order_id) AS ids "
    f"FROM read_csv('{table}/**/*.csv', hive_partitioning=true, all_varchar=true, "
    f"hive_types_autocast=false) GROUP BY ALL ORDER BY ALL"
).fetchall()
got = {(dt, country): [n, total] for dt, country, n, total, _ in rel}
check("orders: total rows", sum(v[0] for v in got.values()), len(expected))
check("orders: distinct order ids", sum(r[4] for r in rel), len(expected))
check("orders: partitions", sorted(got), sorted(want))
check("orders: per-partition count and sum(amount)", got, {k: v for k, v in want.items()})
notes = duckdb.sql(
    f"SELECT order_id, note, customer FROM read_csv('{table}/**/*.csv', hive_partitioning=true, "
    f"all_varchar=true) ORDER BY order_id"
).fetchall()
# CSV has no null: an empty field reads back as NULL in DuckDB, as it does from the input.
notes = [(oid, note or "", customer) for oid, note, customer in notes]
check("orders: text fields byte-exact (quotes, commas, newlines, unicode)",
      sorted(notes), sorted((r["order_id"], r["note"], r["customer"]) for r in expected))

# 1b. --compact merges each partition's files: DuckDB reads the same figures and text.
files_before = len(glob.glob(os.path.join(table, "*", "*", "*.csv")))
ingest("--target", table, "--compact", "--quiet")
files_after = len(glob.glob(os.path.join(table, "*", "*", "*.csv")))
check(f"compact: {files_before} files merged into one per partition", files_after, len(want))
rel = duckdb.sql(
    f"SELECT dt, country, count(*) AS n, sum(CAST(amount AS DECIMAL(18,2))) AS total "
    f"FROM read_csv('{table}/*/*/*.csv', hive_partitioning=true, all_varchar=true, "
    f"hive_types_autocast=false) GROUP BY ALL ORDER BY ALL"
).fetchall()
check("compact: per-partition count and sum(amount)", {(d, c): [n, t] for d, c, n, t in rel},
      {k: v for k, v in want.items()})
compacted = duckdb.sql(
    f"SELECT order_id, note, customer FROM read_csv('{table}/*/*/*.csv', hive_partitioning=true, "
    f"all_varchar=true) ORDER BY order_id"
).fetchall()
check("compact: text fields byte-exact", sorted((o, n or "", c) for o, n, c in compacted), sorted(notes))

# 2. Hostile partition values round-trip through Hive escaping and DuckDB's reader.
hostile = os.path.join(work, "hostile")
ingest("--target", hostile, "--partition-by", "p", "--quiet",
       os.path.join(ROOT, "fixtures", "hostile", "values.csv"))
got = duckdb.sql(
    f"SELECT id, p FROM read_csv('{hostile}/**/*.csv', hive_partitioning=true, all_varchar=true, "
    f"hive_types_autocast=false) ORDER BY CAST(id AS INT)"
).fetchall()
want = [(r["id"], r["p"] or None) for r in rows_of(os.path.join(ROOT, "fixtures", "hostile", "values.csv"))]
check("hostile partition values (empty reads back as NULL)", got, want)
escaped = [p for p in glob.glob(os.path.join(hostile, "*")) if not p.startswith(hostile + "/p=")]
check("hostile: nothing outside p=... directories but _ingest",
      [os.path.basename(p) for p in escaped], ["_ingest"])

# 2b. JSON lines output reads back in DuckDB with typed numbers.
jsonl = os.path.join(work, "jsonl")
ingest("--target", jsonl, "--format", "jsonl", "--partition-by", "dt", "--cast", "order_id=int",
       "--cast", "amount=decimal(12,2)", "--quiet", os.path.join(ROOT, "fixtures", "orders"))
all_rows = [r for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "orders", "*"))) for r in rows_of(p)]
got = duckdb.sql(f"SELECT count(*), round(sum(amount), 2), typeof(any_value(order_id)) "
                 f"FROM read_json('{jsonl}/**/*.jsonl', hive_partitioning=true)").fetchall()[0]
check("jsonl: row count", got[0], len(all_rows))
check("jsonl: sum(amount)", decimal.Decimal(str(got[1])), sum(decimal.Decimal(r["amount"]) for r in all_rows))
check("jsonl: order_id is a number", got[2], "BIGINT")

# 2c. Every output format with every compression it takes, cut into small files:
#     DuckDB finds the files by extension and agrees per partition (count, sum(amount)).
want_by_dt = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for r in all_rows:
    want_by_dt[r["dt"]][0] += 1
    want_by_dt[r["dt"]][1] += decimal.Decimal(r["amount"])
want_by_dt = sorted((dt, n, s) for dt, (n, s) in want_by_dt.items())
matrix = [("csv", "none", "csv", "read_csv"), ("csv", "gzip", "csv.gz", "read_csv"),
          ("csv", "zstd", "csv.zst", "read_csv"), ("jsonl", "none", "jsonl", "read_json"),
          ("jsonl", "gzip", "jsonl.gz", "read_json"), ("jsonl", "zstd", "jsonl.zst", "read_json"),
          ("parquet", "zstd", "parquet", "read_parquet"), ("parquet", "snappy", "parquet", "read_parquet"),
          ("parquet", "none", "parquet", "read_parquet")]
for fmt, comp, ext, reader in matrix:
    out = os.path.join(work, f"{fmt}-{comp}")
    ingest("--target", out, "--format", fmt, "--compression", comp, "--target-file-size", "4K",
           "--cast", "amount=decimal(12,2)", "--partition-by", "dt", "--quiet",
           os.path.join(ROOT, "fixtures", "orders"))
    found = glob.glob(f"{out}/dt=*/*.{ext}")
    check(f"{fmt}, {comp}: every data file ends in .{ext} ({len(found)} files)",
          len(found) > 1 and all(f.endswith("." + ext) for f in found), True)
    got = duckdb.sql(f"SELECT dt, count(*), sum(CAST(amount AS DECIMAL(18,2))) FROM "
                     f"{reader}('{out}/**/*.{ext}', hive_partitioning=true, hive_types_autocast=false) "
                     f"GROUP BY dt ORDER BY dt").fetchall()
    check(f"{fmt}, {comp}: per-partition count and sum(amount)", got, want_by_dt)

# 2d. Parquet: DuckDB agrees with counts and sums; pyarrow reads every file with the
#     promised types.
import pyarrow.parquet as pq
pqt = os.path.join(work, "parquet")
ingest("--target", pqt, "--format", "parquet", "--partition-by", "dt", "--cast", "order_id=int",
       "--cast", "amount=decimal(12,2)", "--cast", "ts=timestamp", "--checkpoint-rows", "300", "--quiet",
       os.path.join(ROOT, "fixtures", "orders"))
got = duckdb.sql(f"SELECT count(*), sum(amount), count(DISTINCT dt) "
                 f"FROM read_parquet('{pqt}/**/*.parquet', hive_partitioning=true)").fetchall()[0]
check("parquet: row count", got[0], len(all_rows))
check("parquet: sum(amount)", got[1], sum(decimal.Decimal(r["amount"]) for r in all_rows))
files = glob.glob(os.path.join(pqt, "dt=*", "*.parquet"))
want_types = {"order_id": "int64", "amount": "decimal128(12, 2)", "ts": "timestamp[us, tz=UTC]", "customer": "string"}
bad = []
for f in files:
    schema = pq.read_schema(f)
    for name, ty in want_types.items():
        if str(schema.field(name).type) != ty:
            bad.append((f, name, str(schema.field(name).type)))
    if "dt" in schema.names:
        bad.append((f, "dt", "partition column inside the file"))
check(f"parquet: pyarrow reads all {len(files)} files with the promised schema", bad, [])
check("parquet: pyarrow row total", sum(pq.read_metadata(f).num_rows for f in files), len(all_rows))

# 2e. Overwrite: the Parquet table of 2d gets one day's file again, corrected (amounts
#     doubled) and with a row for a new day. Every dt partition that file writes to is
#     replaced; DuckDB sees exactly the new rows there and the other days unchanged.
fixed = os.path.join(work, "fixed-2026-11-27.csv")
day = rows_of(os.path.join(ROOT, "fixtures", "orders", "2026-11-27.csv"))
new_rows = [{**r, "amount": str(decimal.Decimal(r["amount"]) * 2)} for r in day]
new_rows.append({**day[0], "order_id": "99999", "dt": "2026-12-01", "amount": "1.00"})
with open(fixed, "w", newline="", encoding="utf-8") as fh:
    w = csv.DictWriter(fh, fieldnames=list(day[0]))
    w.writeheader()
    w.writerows(new_rows)
touched = {r["dt"] for r in new_rows}
before = {f: open(f, "rb").read() for f in files if f.split("dt=")[1].split("/")[0] not in touched}
ingest("--target", pqt, "--format", "parquet", "--partition-by", "dt", "--cast", "order_id=int",
       "--cast", "amount=decimal(12,2)", "--cast", "ts=timestamp", "--checkpoint-rows", "100",
       "--mode", "overwrite-partitions", "--quiet", fixed)
got = duckdb.sql(f"SELECT dt, count(*), sum(amount) FROM read_parquet('{pqt}/**/*.parquet', "
                 f"hive_partitioning=true, hive_types_autocast=false) GROUP BY dt ORDER BY dt").fetchall()
want = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for r in [r for r in all_rows if r["dt"] not in touched] + new_rows:
    want[r["dt"]][0] += 1
    want[r["dt"]][1] += decimal.Decimal(r["amount"])
check(f"overwrite: per-day count and sum(amount), {len(touched)} day(s) replaced",
      [(d, n, s) for d, n, s in got], [(d, n, s) for d, (n, s) in sorted(want.items())])
check(f"overwrite: the {len(before)} files of untouched days byte-identical",
      [f for f, b in before.items() if not os.path.exists(f) or open(f, "rb").read() != b], [])

# 2f. JSON lines inputs (plain, .gz, .zst): DuckDB reads the inputs itself and the table
#     ingest made of them, and the two agree per country.
events = os.path.join(work, "events")
ingest("--target", events, "--partition-by", "country", "--format", "parquet", "--cast", "ms=float",
       "--quiet", os.path.join(ROOT, "fixtures", "events"))
src = os.path.join(ROOT, "fixtures", "events")
want = duckdb.sql(
    f"SELECT country, count(*), count(\"user\"), round(sum(ms), 3) FROM read_json("
    f"['{src}/2026-11-26.jsonl', '{src}/2026-11-27.jsonl.gz', '{src}/2026-11-28.ndjson.zst'], "
    f"format='newline_delimited', columns={{'country': 'VARCHAR', 'user': 'VARCHAR', 'ms': 'DOUBLE'}}) "
    f"GROUP BY ALL ORDER BY ALL").fetchall()
got = duckdb.sql(
    f"SELECT country, count(*), count(\"user\"), round(sum(ms), 3) FROM read_parquet("
    f"'{events}/**/*.parquet', hive_partitioning=true) GROUP BY ALL ORDER BY ALL").fetchall()
check("jsonl input: per-country rows, non-null users and sum(ms) as DuckDB reads the inputs", got, want)

# 3. A pipeline with rejects: DuckDB's glob must see the data and never the rejects.
messy = os.path.join(work, "messy")
ingest("--target", messy, "--quiet", "--null-markers", ",NULL", "--cast", "amount=decimal(12,2)",
       "--cast", "qty=int", "--cast", "ts=timestamp", "--derive", "dt=date(ts)", "--derive", "unit_price=amount / qty",
       "--filter", "country != 'XX'", "--dedupe-key", "order_id", "--drop", "email", "-p", "dt",
       "--max-errors", "1000", "--checkpoint-rows", "50", os.path.join(ROOT, "fixtures", "messy"))
data_rows = reject_rows = 0
for root, dirs, files in os.walk(messy):
    rel = os.path.relpath(root, messy)
    hidden = any(part.startswith(("_", ".")) for part in rel.split(os.sep) if part != ".")
    for f in files:
        is_reject = hidden and f.endswith(".csv.rejects")
        if not is_reject and (hidden or not f.endswith(".csv")):
            continue
        with open(os.path.join(root, f), newline="", encoding="utf-8") as fh:
            n = sum(1 for _ in csv.DictReader(fh))
        if is_reject:
            reject_rows += n
        else:
            data_rows += n
got = duckdb.sql(f"SELECT count(*), count(DISTINCT order_id), sum(amount), min(dt) "
                 f"FROM read_csv('{messy}/**/*.csv', hive_partitioning=true)").fetchall()[0]
check("pipeline: duckdb reads the data rows and none of the rejects", got[0], data_rows)
check("pipeline: order ids stay unique after dedupe", got[1], data_rows)
check("pipeline: some rows were set aside as rejects", reject_rows > 0, True)

# 4. A table evolved on purpose (--evolve add-columns): DuckDB reads old and new files
#    as one table with union_by_name, the old rows' new column as NULL.
evolved = os.path.join(work, "evolved")
ingest("--target", evolved, "--quiet", "-p", "dt", os.path.join(ROOT, "fixtures", "orders"))
extra_dir = os.path.join(work, "evolved-input")
os.makedirs(extra_dir, exist_ok=True)
with open(os.path.join(extra_dir, "2026-11-29.csv"), "w", newline="") as fh:
    fh.write("order_id,dt,ts,customer,email,country,amount,currency,note,channel\n"
             "99001,2026-11-29,2026-11-29T10:00:00Z,c,e,DE,1.00,EUR,,web\n")
ingest("--target", evolved, "--quiet", "-p", "dt", "--evolve", "add-columns", extra_dir)
old_rows = sum(len(rows_of(p)) for p in glob.glob(os.path.join(ROOT, "fixtures", "orders", "*")))
got = duckdb.sql(f"SELECT count(*), count(channel) FROM read_csv('{evolved}/**/*.csv', "
                 f"hive_partitioning=true, union_by_name=true)").fetchall()[0]
check("evolved table: every row, the new column only on the new one", got, (old_rows + 1, 1))

finish("interop")
