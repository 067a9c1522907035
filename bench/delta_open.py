#!/usr/bin/env python3
"""What the Delta log's checkpoints buy readers of a table with many commits: the time
DuckDB (`delta_scan`), polars (`read_delta`) and deltalake (`DeltaTable`) take to read a
table of `--commits` commits, with the Parquet checkpoints ingest's commits leave every
100 versions, and the same table with them removed (every reader then replays every
JSON commit).

    python3 bench/delta_open.py [--commits 10000] [--reps 3] [--ingest BINARY]

The table: one CSV row per checkpoint (`--checkpoint-rows 1`), so one commit and one
file per row, made once and kept under --work (about 46 ms a commit here: 8 minutes for
10,000). Each reader runs in a fresh process; the time is measured inside it, around the
read, imports excluded; the median of `--reps`.
"""
import argparse, glob, os, shutil, statistics, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INGEST = os.path.join(ROOT, "target/release/ingest")
VENV = os.path.join(ROOT, "target/ci-venv")
DUCK_VENV = os.path.join(ROOT, "target/ci-duckdb-delta-venv")

READERS = {
    "deltalake DeltaTable()": (VENV, """
import sys, time, deltalake
t = time.perf_counter(); d = deltalake.DeltaTable(sys.argv[1]); n = len(d.file_uris())
print(time.perf_counter() - t, n)"""),
    "polars read_delta": (VENV, """
import sys, time, polars as pl
t = time.perf_counter(); n = pl.read_delta(sys.argv[1]).height
print(time.perf_counter() - t, n)"""),
    "DuckDB delta_scan": (DUCK_VENV, """
import glob, os, sys, time, duckdb, duckdb_ext
ext = glob.glob(os.path.join(list(duckdb_ext.__path__)[0], "extensions", "*", "*", "delta.duckdb_extension"))
c = duckdb.connect(config={"allow_unsigned_extensions": "true"}); c.execute(f"LOAD '{ext[0]}'")
t = time.perf_counter(); n = c.execute(f"SELECT count(*) FROM delta_scan('{sys.argv[1]}')").fetchone()[0]
print(time.perf_counter() - t, n)"""),
}


def venvs():
    for venv, packages, probe in ((VENV, ["deltalake", "polars"], "import deltalake, polars"),
                                  (DUCK_VENV, ["duckdb==1.4.4", "duckdb-ext-delta"], "import duckdb, duckdb_ext")):
        py = os.path.join(venv, "bin/python")
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        if subprocess.run([py, "-c", probe], capture_output=True).returncode:
            subprocess.run([py, "-m", "pip", "install", "--quiet", *packages], check=True)


def read(reader, table):
    venv, code = READERS[reader]
    # os._exit: deltalake's threads abort at interpreter exit when stdout is a pipe.
    out = subprocess.run([os.path.join(venv, "bin/python"), "-c",
                          code + "\nsys.stdout.flush(); import os; os._exit(0)", table],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="/tmp/ingest-bench")
    ap.add_argument("--ingest", default=INGEST)
    args = ap.parse_args()
    if args.ingest == INGEST:
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=ROOT, check=True)
    venvs()
    table = os.path.join(args.work, f"delta-{args.commits}-commits")
    if not os.path.exists(os.path.join(table, "_ingest", ".complete")):
        shutil.rmtree(table, ignore_errors=True)
        rows = os.path.join(args.work, f"rows-{args.commits}.csv")
        with open(rows, "w") as f:
            f.write("id,v\n" + "".join(f"{i},v{i}\n" for i in range(args.commits)))
        print(f"making a Delta table of {args.commits} commits", file=sys.stderr)
        subprocess.run([args.ingest, "-q", "-t", table, "--table-format", "delta",
                        "--checkpoint-rows", "1", rows], check=True)
        open(os.path.join(table, "_ingest", ".complete"), "w").close()
    bare = table + "-no-checkpoints"
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(table, bare)
    for f in glob.glob(os.path.join(bare, "_delta_log", "*.checkpoint.parquet")) + \
            [os.path.join(bare, "_delta_log", "_last_checkpoint")]:
        os.remove(f)
    checkpoints = len(glob.glob(os.path.join(table, "_delta_log", "*.checkpoint.parquet")))
    print(f"{args.commits:,} commits, {checkpoints} checkpoints; median of {args.reps}, seconds")
    print("| reader | without checkpoints | with | without ÷ with |")
    print("| --- | ---: | ---: | ---: |")
    for reader in READERS:
        times = {"bare": [], "with": []}
        for _ in range(args.reps):
            for kind, t in (("bare", bare), ("with", table)):
                seconds, n = read(reader, t)
                assert n == args.commits, f"{reader} read {n} of {args.commits} on {t}"
                times[kind].append(seconds)
        bare_s, with_s = statistics.median(times["bare"]), statistics.median(times["with"])
        print(f"| {reader} | {bare_s:.2f} | {with_s:.2f} | {bare_s / with_s:.1f}x |", flush=True)
    shutil.rmtree(bare, ignore_errors=True)


if __name__ == "__main__":
    main()
