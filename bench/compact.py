#!/usr/bin/env python3
"""Compacting a Hive table of many small files: `ingest --compact` against DuckDB rewriting it.

    python3 bench/compact.py [--rows 2000000] [--checkpoints 10] [--reps 3] [--ingest BINARY] [--only NAME,…]

The table: `--rows` orders (gen_orders.py --customer-id, as bench/partitions.py) loaded by
ingest into `-p country,b` (4,000 partitions) or `-p country` (40) with `--checkpoint-rows`
rows/checkpoints, so each partition holds one small file per checkpoint: 40,000 files of
about 5 KB at 4,000 partitions, the shape a cron job leaves. Each round copies that table
(`cp -a`, untimed, then `sync`), and times:

- ingest: `ingest -t COPY --compact` (every partition's files merged into one, each merged
  file fsynced and read back against the files it replaces, then swapped in whole);
- DuckDB (threads=2): what a user would script instead, `COPY (SELECT * FROM
  read_csv('COPY/*/…/*.csv', hive_partitioning=true, all_varchar=true)) TO NEW
  (FORMAT csv, PARTITION_BY (…))`: the same one file per partition, into a new
  directory, with no fsync, no check and no swap (the user would still have to replace
  the old table with it).

The ratio is DuckDB's time over ingest's in each round (median); above 1 means ingest
was faster. Peak RSS is the median of ingest's runs.
"""
import argparse, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import INGEST, PY, setup  # noqa: E402
from partitions import BUCKET, dataset  # noqa: E402

DUCK = ("import duckdb,sys; c=duckdb.connect(); c.execute('SET threads=2'); "
        "c.execute(f\"COPY (SELECT * FROM read_csv('{sys.argv[1]}', hive_partitioning=true, "
        "all_varchar=true)) TO '{sys.argv[2]}' (FORMAT csv, PARTITION_BY ({sys.argv[3]}))\")")
# (name, partition columns, the glob of its data files below the table)
TABLES = [("csv-4000", "country,b", "*/*/*.csv"), ("csv-40", "country", "*/*.csv")]


def run_timed(cmd):
    subprocess.run(["sync"], check=True)
    stats = "/tmp/compact-bench.time"
    start = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", stats, *cmd], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rss_kb = int(open(stats).read().split()[-1])
    os.remove(stats)
    return wall, rss_kb


def files_in(table):
    return sum(len(fs) for d, _, fs in os.walk(table) if "/_" not in d + "/" and "/." not in d)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--checkpoints", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="/tmp/ingest-bench")
    ap.add_argument("--ingest", default=INGEST, help="the binary to measure (default: a fresh release build)")
    ap.add_argument("--only", help="comma-separated tables of: " + ", ".join(n for n, *_ in TABLES))
    args = ap.parse_args()
    if args.ingest == INGEST:
        setup()
    data = dataset(args.work, args.rows)
    only = set(args.only.split(",")) if args.only else None
    print("| table | files before | ingest --compact | DuckDB rewrite | DuckDB ÷ ingest | ingest peak RSS | files after |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, by, glob in TABLES:
        if only and name not in only:
            continue
        base = os.path.join(args.work, f"compact-{name}")
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run([args.ingest, "-q", "-t", base, "-p", by, *BUCKET,
                        "--checkpoint-rows", str(args.rows // args.checkpoints), data], check=True)
        before = files_in(base)
        copy, new = base + "-copy", base + "-new"
        walls, rss, after = {"ingest": [], "duckdb": []}, [], 0
        for _ in range(args.reps):
            for tool in ("ingest", "duckdb"):
                for d in (copy, new):
                    shutil.rmtree(d, ignore_errors=True)
                subprocess.run(["cp", "-a", base, copy], check=True)
                if tool == "ingest":
                    wall, kb = run_timed([args.ingest, "-q", "-t", copy, "--compact"])
                    rss.append(kb)
                    after = files_in(copy)
                else:
                    wall, _ = run_timed([PY, "-c", DUCK, os.path.join(copy, glob), new, by])
                walls[tool].append(wall)
        ratio = statistics.median(d / i for d, i in zip(walls["duckdb"], walls["ingest"]))
        print(f"| {name} | {before:,} | {statistics.median(walls['ingest']):.2f} s "
              f"| {statistics.median(walls['duckdb']):.2f} s | {ratio:.2f}x "
              f"| {statistics.median(rss) / 1024:.0f} MiB | {after:,} |", flush=True)
        for d in (base, copy, new):
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
