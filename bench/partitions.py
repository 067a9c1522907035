#!/usr/bin/env python3
"""Many partitions per checkpoint: ingest against DuckDB's partitioned COPY, CSV and Parquet.

    python3 bench/partitions.py [--rows 2000000] [--reps 3] [--ingest BINARY] [--only NAME,…] [--out DIR]

The data: `--rows` orders (gen_orders.py --customer-id, 4 files, about 115 bytes a row)
loaded as a real table is partitioned, by country and a bucket of the customer:
`-p country,b --cast customer_id=int --derive 'b=customer_id % 100'`, 40 x 100 = 4,000
partitions; and as a control the same load by country alone (40 partitions). DuckDB
(threads=2, its own type detection, as ingest infers types on a first load) runs
`COPY (SELECT *, customer_id % 100 AS b FROM read_csv(…)) TO … (PARTITION_BY (country, b))`,
FORMAT csv, and parquet with zstd as ingest's default codec.

Each pair runs alternated on fresh, `sync`ed output with warm inputs (bench.py's `timed`),
`--reps` rounds. Every run writes a directory of its own, and all of them are removed when
the bench ends: on an ext4 without a journal (this VM's root) each inode allocation skips
every inode freed in the last minute or so, one buffer lookup each, so deleting the last
run's 8,000 files just before a run made both tools' creates and mkdirs crawl (perf: 25%
of all samples in `recently_deleted`): a cost of the bench, not of loading. `--reps 5`
needs about 7 GB free where the tables go. The ratio is DuckDB's time over ingest's in
each round (median), so above 1 means ingest was faster. Peak RSS is the median of
ingest's runs. Files is what each tool left in the table (ingest's `_ingest/` state
aside). Each round's two times go to stderr.
"""
import argparse, glob, os, shutil, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import INGEST, PY, ROOT, setup, timed  # noqa: E402

DUCK = ("import duckdb,sys; c=duckdb.connect(); c.execute('SET threads=2'); "
        "c.execute(f\"COPY (SELECT *, customer_id % 100 AS b FROM read_csv('{sys.argv[1]}/*.csv')) "
        "TO '{sys.argv[2]}' (FORMAT {sys.argv[3]}, PARTITION_BY ({sys.argv[4]}))\")")
BUCKET = ["--cast", "customer_id=int", "--derive", "b=customer_id % 100"]
# (name, partition columns, ingest's format arguments, DuckDB's format clause)
LOADS = [
    ("csv-4000", "country,b", [], "csv"),
    ("parquet-4000", "country,b", ["--format", "parquet"], "parquet, COMPRESSION zstd"),
    ("csv-40", "country", [], "csv"),
    ("parquet-40", "country", ["--format", "parquet"], "parquet, COMPRESSION zstd"),
]


def dataset(work, rows):
    data = os.path.join(work, f"orders-{rows}-customers")
    marker = os.path.join(data, ".complete")
    if not os.path.exists(marker):
        shutil.rmtree(data, ignore_errors=True)
        print(f"generating {rows} orders in {data}", file=sys.stderr)
        subprocess.run([sys.executable, os.path.join(ROOT, "bench/gen_orders.py"), data, "--rows",
                        str(rows), "--files", "4", "--customer-id"], check=True)
        open(marker, "w").close()
    return data


def files_in(table):
    return sum(len(fs) for d, _, fs in os.walk(table) if "/_" not in d + "/" and "/." not in d)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="/tmp/ingest-bench")
    ap.add_argument("--ingest", default=INGEST, help="the binary to measure (default: a fresh release build)")
    ap.add_argument("--only", help="comma-separated loads of: " + ", ".join(n for n, *_ in LOADS))
    ap.add_argument("--out", help="where the tables go (default: under --work); e.g. a journaled ext4 "
                    "mounted for the purpose, see bench/README.md")
    args = ap.parse_args()
    if args.ingest == INGEST:
        setup()
    data = dataset(args.work, args.rows)
    base = os.path.join(args.out or args.work, "partitions-out")
    outs = []  # every run's table, removed at the end (see above)

    def run(command):
        out = f"{base}-{len(outs)}"
        outs.append(out)
        wall, kb = timed(command(out), out)
        return wall, kb, files_in(out)

    for stale in glob.glob(base + "-*"):
        shutil.rmtree(stale)
    only = set(args.only.split(",")) if args.only else None
    # Every run's table stays until the end: a CSV table is about the input's size, a
    # Parquet one under a third of it.
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs)
    need = sum(2 * args.reps * (size if not fmt else size // 3)
               for name, _, fmt, _ in LOADS if not only or name in only)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    free = shutil.disk_usage(os.path.dirname(base)).free
    if free < need * 11 // 10:
        sys.exit(f"{os.path.dirname(base)} has {free / 1e9:.1f} GB free; these runs keep "
                 f"about {need / 1e9:.1f} GB of tables until the bench ends")
    print("| load | ingest | DuckDB | DuckDB ÷ ingest | ingest peak RSS | files (ingest / DuckDB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    try:
        for name, by, fmt, duck_fmt in LOADS:
            if only and name not in only:
                continue
            commands = {
                "ingest": lambda out: [args.ingest, "-q", "-t", out, "-p", by, *BUCKET, *fmt, data],
                "duckdb": lambda out: [PY, "-c", DUCK, data, out, duck_fmt, by],
            }
            walls, rss, files = {"ingest": [], "duckdb": []}, [], {}
            for _ in range(args.reps):
                for tool, command in commands.items():
                    wall, kb, files[tool] = run(command)
                    walls[tool].append(wall)
                    if tool == "ingest":
                        rss.append(kb)
            # Each round on stderr: on a shared VM either tool's time swings by a third
            # from one minute to the next, and the rounds show which one moved.
            print(f"{name} rounds (ingest / DuckDB, s): " + ", ".join(
                f"{o:.2f} / {t:.2f}" for o, t in zip(walls["ingest"], walls["duckdb"])),
                file=sys.stderr, flush=True)
            ratio = statistics.median(t / o for o, t in zip(walls["ingest"], walls["duckdb"]))
            print(f"| {name} | {statistics.median(walls['ingest']):.2f} s "
                  f"| {statistics.median(walls['duckdb']):.2f} s | {ratio:.2f}x "
                  f"| {statistics.median(rss) / 1024:.0f} MiB | {files['ingest']} / {files['duckdb']} |",
                  flush=True)
    finally:
        for out in outs:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
