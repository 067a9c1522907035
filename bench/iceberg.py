#!/usr/bin/env python3
"""Loading into an Iceberg table on local disk (issue 43): `ingest --table-format iceberg`
against pyiceberg's `Table.append`, same CSV, same partitioning, same SQL catalog kind,
same run.

    python3 bench/iceberg.py [--mb 500] [--reps 3] [--work /tmp/ingest-bench]

Installs pyiceberg (with its SQLite catalog) and pyarrow into target/bench-venv,
generates the orders data set (bench/gen_orders.py, 4 files), then alternates the two
loads `--reps` times, each into a fresh table and a fresh catalog file:

  iceberg    ingest --table-format iceberg --catalog sqlite:///… -p country: a snapshot
             per checkpoint, exactly once (journal, fsyncs, marker and property);
             types inferred on a first load, zstd Parquet
  pyiceberg  pyarrow's CSV reader (its own type inference) reads the files, a table is
             created in a SqlCatalog on SQLite with the arrow schema and an identity
             partition on country, and `Table.append` writes it in one snapshot (zstd
             Parquet, pyiceberg's default codec)

Prints the median wall time, MB/s, peak RSS and CPU per tool, and the median over rounds
of pyiceberg's time / ingest's (above 1: ingest faster).
"""
import argparse, os, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INGEST = os.path.join(ROOT, "target/release/ingest")
VENV = os.path.join(ROOT, "target/bench-venv")
sys.path.insert(0, os.path.join(ROOT, "bench"))

APPEND = r'''
import sys
import pyarrow as pa, pyarrow.csv as pcsv
from pyiceberg.catalog.sql import SqlCatalog
db, location, files = sys.argv[1], sys.argv[2], sys.argv[3:]
table = pa.concat_tables(
    pcsv.read_csv(f, parse_options=pcsv.ParseOptions(newlines_in_values=True)) for f in files)
catalog = SqlCatalog("bench", uri=f"sqlite:///{db}", warehouse=f"file://{location}")
catalog.create_namespace_if_not_exists("bench")
t = catalog.create_table("bench.orders", schema=table.schema, location=f"file://{location}")
with t.update_spec() as spec:
    spec.add_identity("country")
t.append(table)
'''


def python():
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    if subprocess.run([py, "-c", "import pyiceberg.catalog.sql, sqlalchemy, pyarrow"],
                      capture_output=True).returncode:
        subprocess.run([py, "-m", "pip", "install", "--quiet", "pyiceberg[sql-sqlite]==0.12.0",
                        "pyarrow"], check=True)
    return py


def timed(cmd):
    """Wall seconds, peak RSS (MiB) and CPU seconds of `cmd`."""
    start = time.time()
    out = subprocess.run(["/usr/bin/time", "-f", "%M %U %S"] + cmd, capture_output=True, text=True)
    wall = time.time() - start
    if out.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {out.stderr}")
    rss, user, system = out.stderr.strip().splitlines()[-1].split()
    return wall, int(rss) / 1024, float(user) + float(system)


def rows_in(py, db, name, catalog):
    script = ("import sys; from pyiceberg.catalog.sql import SqlCatalog; "
              "c = SqlCatalog(sys.argv[3], uri=f'sqlite:///{sys.argv[1]}'); "
              "t = c.load_table(sys.argv[2]); "
              "print(int(t.current_snapshot().summary['total-records']), len(t.snapshots()))")
    out = subprocess.run([py, "-c", script, db, name, catalog], capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="/tmp/ingest-bench")
    args = ap.parse_args()
    from bench import dataset, warm
    py = python()
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=ROOT, check=True)
    os.makedirs(args.work, exist_ok=True)
    _, files, size = dataset(args.work, args.mb)

    def run(tool, out):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        db = os.path.join(out, "catalog.db")
        table = os.path.join(out, "orders")
        subprocess.run(["sync"])
        warm(files)
        if tool == "iceberg":
            cmd = [INGEST, "-q", "-t", table, "--table-format", "iceberg", "--catalog",
                   f"sqlite:///{db}", "--table-name", "bench.orders", "-p", "country"] + files
        else:
            cmd = [py, "-c", APPEND, db, table] + files
        result = timed(cmd)
        counted = rows_in(py, db, "bench.orders", "ingest" if tool == "iceberg" else "bench")
        shutil.rmtree(out, ignore_errors=True)
        return result, counted

    tools = ["iceberg", "pyiceberg"]
    results = {t: [] for t in tools}
    versus = []
    for rep in range(args.reps):
        order = tools if rep % 2 == 0 else tools[::-1]
        times = {}
        for tool in order:
            (wall, rss, cpu), (rows, snapshots) = run(tool, os.path.join(args.work, f"out-{tool}"))
            times[tool] = wall
            results[tool].append((wall, rss, cpu))
            print(f"  round {rep + 1}: {tool:9} {wall:7.2f} s  {rss:7.0f} MiB  {cpu:6.1f} CPU s  "
                  f"{rows} rows in {snapshots} snapshot(s)", file=sys.stderr)
        versus.append(times["pyiceberg"] / times["iceberg"])
    mb = size / 1e6
    print(f"\n{mb:.0f} MB of CSV in {len(files)} files, partitioned by country, local disk, "
          f"SQLite catalog, {args.reps} rounds")
    print(f"{'tool':10} {'median s':>9} {'MB/s':>7} {'peak RSS MiB':>13} {'CPU s':>7}")
    for tool, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        print(f"{tool:10} {wall:9.2f} {mb / wall:7.1f} {max(r[1] for r in runs):13.0f} "
              f"{statistics.median(r[2] for r in runs):7.1f}")
    print(f"pyiceberg time / ingest iceberg time, median over rounds: {statistics.median(versus):.2f}x "
          f"(rounds: {', '.join(f'{r:.2f}' for r in versus)})")


if __name__ == "__main__":
    main()
