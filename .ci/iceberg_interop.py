#!/usr/bin/env python3
"""Interop check for Iceberg tables: readers that are not ours read what `ingest` wrote.

Usage: iceberg_interop.py INGEST_BINARY WORKDIR [postgresql | rest] [s3://BUCKET/PREFIX]

pyiceberg's SqlCatalog on the catalog ingest commits through (a SQLite file, or with
`postgresql` a fresh database on .ci/pg-store's server (INGEST_TEST_PG_ADMIN), the password
in PGPASSWORD), or with `rest` its RestCatalog on the S3 store's Iceberg REST catalog
(INGEST_TEST_ICEBERG_REST, OAuth2 with the store's key; the tables in its table bucket),
with the tables in WORKDIR or, given a bucket prefix, in the S3 store
.ci/s3-store started (INGEST_TEST_S3_*; DuckDB through its httpfs extension), DuckDB's Iceberg
extension (`iceberg_scan` of the current metadata file) and polars (`scan_iceberg`) read
each table; the figures they must agree on are computed here from the fixture files with
Python's csv module, independently of ingest.

Runs in a venv of its own (.ci/run): the DuckDB extensions' wheels on PyPI
(`duckdb-ext-iceberg`, `duckdb-ext-avro`) are built for DuckDB 1.4.4 and loaded from the
wheels' files, offline.
"""
import collections, csv, datetime, decimal, glob, os, subprocess, sys

import duckdb
import duckdb_ext
import polars as pl
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from readback import check, finish, rows_of

# polars plans an Iceberg scan through pyiceberg unless its own plugin is installed, and
# warns about it on every scan: the plan is the same.
os.environ.setdefault("POLARS_ICEBERG_PLANNER", "pyiceberg")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary, work, modes = sys.argv[1], sys.argv[2], sys.argv[3:]
base = next((m.rstrip("/") for m in modes if m.startswith("s3://")), None)
io = {}
if base:
    # ingest and pyiceberg reach the bucket with the same credentials, each its own way.
    endpoint = os.environ["INGEST_TEST_S3_ENDPOINT"]
    key_id, secret = os.environ["INGEST_TEST_S3_KEY_ID"], os.environ["INGEST_TEST_S3_SECRET"]
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=key_id,
                      AWS_SECRET_ACCESS_KEY=secret, AWS_REGION="us-east-1", AWS_ALLOW_HTTP="true",
                      INGEST_WORK_DIR=os.path.join(work, "iceberg-s3-working-copy"))
    io = {"s3.endpoint": endpoint, "s3.access-key-id": key_id,
          "s3.secret-access-key": secret, "s3.region": "us-east-1"}
if "rest" in modes:
    # ingest takes the catalog's OAuth2 client credentials from ICEBERG_CREDENTIAL.
    from pyiceberg.catalog.rest import RestCatalog
    rest = os.environ["INGEST_TEST_ICEBERG_REST"]
    warehouse = f"s3://{os.environ['INGEST_TEST_ICEBERG_BUCKET']}/"
    os.environ["ICEBERG_CREDENTIAL"] = f"{key_id}:{secret}"
    uri = f"{rest}?warehouse={warehouse}"
    catalog = RestCatalog("ingest", uri=rest, warehouse=warehouse,
                          credential=f"{key_id}:{secret}", **io)
    work = os.path.join(work, "iceberg-rest")
    os.makedirs(work)
elif "postgresql" in modes:
    # ingest takes the password from PGPASSWORD, as psql does; SQLAlchemy from the URI.
    # A database of its own for each run: the runs use the same table names.
    import psycopg2
    admin = os.environ["INGEST_TEST_PG_ADMIN"]
    database = "interop_s3" if base else "interop_local"
    conn = psycopg2.connect(admin)
    conn.autocommit = True  # CREATE DATABASE runs outside a transaction
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {database}")
        cur.execute(f"CREATE DATABASE {database}")
    conn.close()
    uri = admin.rsplit("/", 1)[0] + "/" + database
    user, server = uri.removeprefix("postgresql://").split("@", 1)
    catalog = SqlCatalog("ingest", uri=f"postgresql+psycopg2://{user}:{os.environ['PGPASSWORD']}@{server}",
                         **io)
    work = os.path.join(work, "iceberg-postgresql" + ("-s3" if base else ""))
    os.makedirs(work)
else:
    uri = f"sqlite:///{os.path.join(work, 'iceberg-catalog.db')}"
    catalog = SqlCatalog("ingest", uri=uri, **io)
print(f"== catalog {uri}, tables in {base or work}")


def at(name):
    """Where table `name` goes: under the bucket's prefix, or in WORKDIR."""
    return f"{base}/{name}" if base else os.path.join(work, name)

con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
for name in ("avro", "iceberg"):
    ext = glob.glob(os.path.join(list(duckdb_ext.__path__)[0], "extensions", "*", "*",
                                 f"{name}.duckdb_extension"))
    if not ext:
        sys.exit(f"the {name} extension is not in the duckdb-ext-{name} wheel")
    con.execute(f"LOAD '{ext[0]}'")
scan_options = {}
if base:
    ext = glob.glob(os.path.join(list(duckdb_ext.__path__)[0], "extensions", "*", "*",
                                 "httpfs.duckdb_extension"))
    if not ext:
        sys.exit("the httpfs extension is not in the duckdb-ext-httpfs wheel")
    con.execute(f"LOAD '{ext[0]}'")
    con.execute(f"CREATE SECRET (TYPE s3, KEY_ID '{key_id}', SECRET '{secret}', "
                f"ENDPOINT '{endpoint.removeprefix('http://')}', URL_STYLE 'path', "
                f"USE_SSL false, REGION 'us-east-1')")
    # polars hands these to pyiceberg's file IO.
    scan_options = {"storage_options": io}


def ingest(*args, env=None, check_exit=True):
    return subprocess.run([binary, *args], check=check_exit, capture_output=not check_exit,
                          env=env)


def current_metadata(name):
    """The metadata file the catalog names now: what DuckDB and polars are given."""
    return catalog.load_table(name).metadata_location


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
per_day = sorted(collections.Counter(datetime.date.fromisoformat(r["dt"]) for r in expected).items())

# 1. The orders, typed, deduped, partitioned by country and day, a snapshot per 100 rows.
table = at("iceberg-orders")
ingest("--target", table, "--table-format", "iceberg", "--catalog", uri,
       "--table-name", "sales.orders", "--partition-by", "country,dt",
       "--dedupe-key", "order_id", "--cast", "order_id=int", "--cast", "amount=decimal(12,2)",
       "--cast", "ts=timestamp", "--cast", "dt=date", "--checkpoint-rows", "100", "--quiet", orders)
t = catalog.load_table("sales.orders")
checkpoints = (len(all_rows) + 99) // 100  # a checkpoint every 100 rows read
history = [s for s in t.snapshots()]
check("pyiceberg: one snapshot per checkpoint", len(history), checkpoints)
check("pyiceberg: each snapshot's marker, in order",
      [s.summary["ingest.checkpoint"] for s in history], [str(i) for i in range(1, checkpoints + 1)])
run = history[-1].summary["ingest.run"]
check("pyiceberg: the job's property names its last checkpoint",
      t.properties.get("ingest.checkpoint.default"), f"{run}:{checkpoints}")
check("pyiceberg: partition spec", [(f.name, str(f.transform)) for f in t.spec().fields],
      [("country", "identity"), ("dt", "identity")])
arrow = t.scan().to_arrow()
types = {f.name: str(f.type) for f in arrow.schema}
check("pyiceberg: promised types", {k: types[k] for k in ("order_id", "amount", "ts", "dt", "country")},
      {"order_id": "int64", "amount": "decimal128(12, 2)", "ts": "timestamp[us, tz=UTC]",
       "dt": "date32[day]", "country": "large_string"}, reader="got")
got = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for country, amount in zip(arrow.column("country").to_pylist(), arrow.column("amount").to_pylist()):
    got[country][0] += 1
    got[country][1] += amount
check("pyiceberg: per-country count and sum(amount)", sorted((c, n, s) for c, (n, s) in got.items()), want)
check("pyiceberg: distinct order ids", len(set(arrow.column("order_id").to_pylist())), len(expected))
fr = t.scan(row_filter="country == 'FR'").to_arrow()
check("pyiceberg: a partition filter reads that partition's rows", fr.num_rows,
      sum(n for c, n, _ in want if c == "FR"))
first = t.scan(snapshot_id=history[0].snapshot_id).to_arrow().num_rows
check("pyiceberg: the first snapshot reads as the first checkpoint committed it", 0 < first <= 100, True)

meta = current_metadata("sales.orders")
got = con.sql(f"SELECT country, count(*), sum(amount) FROM iceberg_scan('{meta}') "
              f"GROUP BY ALL ORDER BY ALL").fetchall()
check("duckdb iceberg_scan: per-country count and sum(amount)", got, want)
got = con.sql(f"SELECT dt, count(*) FROM iceberg_scan('{meta}') GROUP BY ALL ORDER BY ALL").fetchall()
check("duckdb iceberg_scan: per-day count (a date partition)", got, per_day)
types = dict(con.sql(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "
                     f"iceberg_scan('{meta}'))").fetchall())
check("duckdb iceberg_scan: types", [types[c] for c in ("order_id", "amount", "ts", "dt")],
      ["BIGINT", "DECIMAL(12,2)", "TIMESTAMP WITH TIME ZONE", "DATE"])

frame = pl.scan_iceberg(t).collect()
check("polars scan_iceberg: row count", frame.height, len(expected))
by = frame.group_by("country").agg(pl.len().alias("n"), pl.col("amount").sum().alias("s")).sort("country")
check("polars scan_iceberg: per-country count and sum(amount)",
      [(c, n, decimal.Decimal(str(s)).quantize(decimal.Decimal("0.01"))) for c, n, s in by.iter_rows()],
      [(c, n, s.quantize(decimal.Decimal("0.01"))) for c, n, s in want])
check("polars scan_iceberg of the metadata file: row count", pl.scan_iceberg(meta, **scan_options).collect().height,
      len(expected))

# 2. Nulls stay nulls: empty fields of typed columns, an empty partition value.
nulls_csv = os.path.join(work, "iceberg-nulls.csv")
with open(nulls_csv, "w", newline="") as fh:
    fh.write("id,qty,price,day,flag,p\n1,3,1.25,2026-11-28,true,a\n2,,,,,\n3,5,,2026-11-30,false,a\n")
ingest("--target", at("iceberg-nulls"), "--table-format", "iceberg",
       "--catalog", uri, "--partition-by", "p", "--cast", "id=int", "--cast", "qty=int",
       "--cast", "price=decimal(9,2)", "--cast", "day=date", "--cast", "flag=bool", "--quiet", nulls_csv)
rows = sorted(catalog.load_table("default.iceberg-nulls").scan().to_arrow().to_pylist(),
              key=lambda r: r["id"])
check("pyiceberg: nulls as nulls (typed columns and the partition value)", rows, [
    {"id": 1, "qty": 3, "price": decimal.Decimal("1.25"), "day": datetime.date(2026, 11, 28), "flag": True, "p": "a"},
    {"id": 2, "qty": None, "price": None, "day": None, "flag": None, "p": None},
    {"id": 3, "qty": 5, "price": None, "day": datetime.date(2026, 11, 30), "flag": False, "p": "a"},
])
meta = current_metadata("default.iceberg-nulls")
check("duckdb iceberg_scan: nulls",
      con.sql(f"SELECT id, qty, p FROM iceberg_scan('{meta}') ORDER BY id").fetchall(),
      [(1, 3, "a"), (2, None, None), (3, 5, "a")])

# 3. A crashed run: readers never see a checkpoint before its commit; a lost reply is
#    never committed twice; recovery finishes the table.
crashed = at("iceberg-crashed")
load = [binary, "--target", crashed, "--table-format", "iceberg", "--catalog", uri,
        "--partition-by", "dt", "--checkpoint-rows", "100", "--quiet", orders]
env = dict(os.environ, INGEST_FAIL_POINT="iceberg.commit.before:3")
subprocess.run(load, env=env, capture_output=True)
check("crash before the third commit: readers see two checkpoints",
      catalog.load_table("default.iceberg-crashed").scan().to_arrow().num_rows, 200)
ingest("--target", crashed, "--recover", "--quiet")
t = catalog.load_table("default.iceberg-crashed")
check("after --recover: every row once", t.scan().to_arrow().num_rows, len(all_rows))
check("after --recover: one snapshot per checkpoint", len(t.snapshots()), checkpoints)

lost = at("iceberg-lost-reply")
env = dict(os.environ, INGEST_FAIL_POINT="iceberg.commit.written:2")
subprocess.run([a if a != crashed else lost for a in load], env=env, capture_output=True)
ingest("--target", lost, "--recover", "--quiet")
t = catalog.load_table("default.iceberg-lost-reply")
check("a commit made and never acknowledged: every row once", t.scan().to_arrow().num_rows, len(all_rows))
check("a commit made and never acknowledged: made once",
      sorted(int(s.summary["ingest.checkpoint"]) for s in t.snapshots()), list(range(1, checkpoints + 1)))

# 4. --abort takes a crashed run's committed rows out in one delete snapshot; the
#    snapshots before it still read as they did.
aborted = at("iceberg-aborted")
env = dict(os.environ, INGEST_FAIL_POINT="checkpoint.committed.after:2")
subprocess.run([a if a != crashed else aborted for a in load], env=env, capture_output=True)
check("crash after two commits: readers see them",
      catalog.load_table("default.iceberg-aborted").scan().to_arrow().num_rows, 200)
ingest("--target", aborted, "--abort", "--quiet")
t = catalog.load_table("default.iceberg-aborted")
check("after --abort: the run's rows are out of the table", t.scan().to_arrow().num_rows, 0)
check("after --abort: one delete snapshot", [s.summary.operation.value for s in t.snapshots()],
      ["append", "append", "delete"])
check("after --abort: the snapshot before it still reads",
      t.scan(snapshot_id=t.snapshots()[1].snapshot_id).to_arrow().num_rows, 200)
meta = current_metadata("default.iceberg-aborted")
check("duckdb iceberg_scan after --abort", con.sql(f"SELECT count(*) FROM iceberg_scan('{meta}')").fetchone()[0], 0)

# 5. --mode overwrite-partitions replaces each (country, day) it writes to in one
#    overwrite snapshot, the manifests it rewrote read by every reader.
fix_rows = [dict(r) for r in expected if r["dt"] == "2026-11-27"][:20]
for i, row in enumerate(fix_rows):
    row["amount"] = f"{i}.00"
fix_csv = os.path.join(work, "iceberg-fix.csv")
with open(fix_csv, "w", newline="") as fh:
    writer = csv.DictWriter(fh, fieldnames=list(fix_rows[0].keys()))
    writer.writeheader()
    writer.writerows(fix_rows)
ingest("--target", table, "--table-format", "iceberg", "--catalog", uri,
       "--table-name", "sales.orders", "--partition-by", "country,dt", "--job", "fix",
       "--mode", "overwrite-partitions", "--cast", "order_id=int", "--cast", "amount=decimal(12,2)",
       "--cast", "ts=timestamp", "--cast", "dt=date", "--quiet", fix_csv)
touched = {(r["country"], r["dt"]) for r in fix_rows}
after = [r for r in expected if (r["country"], r["dt"]) not in touched] + fix_rows
want = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for row in after:
    want[row["country"]][0] += 1
    want[row["country"]][1] += decimal.Decimal(row["amount"])
want = sorted((c, n, s) for c, (n, s) in want.items())
t = catalog.load_table("sales.orders")
check("overwrite: one overwrite snapshot", t.current_snapshot().summary.operation.value, "overwrite")
arrow = t.scan().to_arrow()
got = collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for country, amount in zip(arrow.column("country").to_pylist(), arrow.column("amount").to_pylist()):
    got[country][0] += 1
    got[country][1] += amount
check("pyiceberg after overwrite: per-country count and sum(amount)",
      sorted((c, n, s) for c, (n, s) in got.items()), want)
meta = current_metadata("sales.orders")
got = con.sql(f"SELECT country, count(*), sum(amount) FROM iceberg_scan('{meta}') "
              f"GROUP BY ALL ORDER BY ALL").fetchall()
check("duckdb iceberg_scan after overwrite: per-country count and sum(amount)", got, want)
check("polars after overwrite: row count", pl.scan_iceberg(t).collect().height, len(after))

# 6. Another writer in between: pyiceberg appends to the table through the same catalog,
#    then ingest commits on top of pyiceberg's snapshot; both writers' rows are there.
t = catalog.load_table("sales.orders")
extra = t.scan(row_filter="country == 'FR'").to_arrow()
extra = extra.set_column(extra.schema.get_field_index("order_id"), "order_id",
                         pa.array([i + 10_000_000 for i in extra.column("order_id").to_pylist()],
                                  pa.int64()))
t.append(extra)
check("pyiceberg's own append in between", catalog.load_table("sales.orders").current_snapshot()
      .summary.operation.value, "append")
more_csv = os.path.join(work, "iceberg-more.csv")
with open(more_csv, "w", newline="") as fh:
    writer = csv.DictWriter(fh, fieldnames=list(fix_rows[0].keys()))
    writer.writeheader()
    for row in fix_rows:
        writer.writerow(dict(row, order_id=str(int(row["order_id"]) + 20_000_000)))
ingest("--target", table, "--table-format", "iceberg", "--catalog", uri,
       "--table-name", "sales.orders", "--partition-by", "country,dt", "--job", "after-pyiceberg",
       "--cast", "order_id=int", "--cast", "amount=decimal(12,2)",
       "--cast", "ts=timestamp", "--cast", "dt=date", "--quiet", more_csv)
t = catalog.load_table("sales.orders")
check("ingest commits on pyiceberg's snapshot: its parent",
      t.snapshot_by_id(t.current_snapshot().parent_snapshot_id).summary.get("ingest.job"), None)
check("ingest on pyiceberg's snapshot: every writer's rows",
      t.scan().to_arrow().num_rows, len(after) + extra.num_rows + len(fix_rows))
meta = current_metadata("sales.orders")
check("duckdb iceberg_scan of both writers' rows",
      con.sql(f"SELECT count(*) FROM iceberg_scan('{meta}')").fetchone()[0],
      len(after) + extra.num_rows + len(fix_rows))

finish(f"iceberg interop ({uri.split(':')[0]} catalog, tables in {base or 'a directory'})")
