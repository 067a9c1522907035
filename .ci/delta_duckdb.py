#!/usr/bin/env python3
"""DuckDB reads the Delta tables that .ci/delta_interop.py left in WORKDIR, through its
Delta extension (`delta_scan`), and agrees with the fixtures.

Usage: delta_duckdb.py WORKDIR

Runs in a venv of its own: the extension's wheels on PyPI (`duckdb-ext-delta`) are built
for DuckDB 1.4.4, and are loaded from the wheel's file, offline.
"""
import collections, csv, decimal, glob, gzip, io, os, sys

import duckdb
import duckdb_ext
from readback import check, finish, rows_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
work = sys.argv[1]

ext = glob.glob(os.path.join(list(duckdb_ext.__path__)[0], "extensions", "*", "*",
                             "delta.duckdb_extension"))
if not ext:
    sys.exit("the delta extension is not in the duckdb-ext-delta wheel")
con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{ext[0]}'")

seen, want = set(), collections.defaultdict(lambda: [0, decimal.Decimal(0)])
for path in sorted(glob.glob(os.path.join(ROOT, "fixtures", "orders", "*"))):
    for row in rows_of(path):
        if row["order_id"] not in seen:
            seen.add(row["order_id"])
            want[row["country"]][0] += 1
            want[row["country"]][1] += decimal.Decimal(row["amount"])
got = con.sql(f"SELECT country, count(*), sum(amount) FROM delta_scan('{work}/delta-orders') "
              f"GROUP BY ALL ORDER BY ALL").fetchall()
check("duckdb delta_scan: per-country count and sum(amount)", got,
      sorted((c, n, s) for c, (n, s) in want.items()))
types = dict(con.sql(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM "
                     f"delta_scan('{work}/delta-orders'))").fetchall())
check("duckdb delta_scan: types", [types[c] for c in ("order_id", "amount", "ts", "dt")],
      ["BIGINT", "DECIMAL(12,2)", "TIMESTAMP WITH TIME ZONE", "DATE"])
got = con.sql(f"SELECT id, qty, p FROM delta_scan('{work}/delta-nulls') ORDER BY id").fetchall()
check("duckdb delta_scan: nulls", got, [(1, 3, "a"), (2, None, None), (3, 5, "a")])

finish("duckdb delta interop")
