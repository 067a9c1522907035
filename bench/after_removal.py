#!/usr/bin/env python3
"""A 4,000-partition load just after a table of the same shape was removed: ingest
against DuckDB's partitioned COPY, each run on a filesystem whose freshly freed inodes
it must allocate past.

    python3 bench/after_removal.py [--rows 2000000] [--reps 4] [--ingest BIN[,BIN…]] [--out DIR]

On an ext4 without a journal (this VM's root) each inode allocation skips every inode
freed in the last minute (five while its inode table block is dirty), one buffer
lookup each: a load that follows a cleanup, a retention job or another load's removal
pays it in every create and mkdir. partitions.py keeps its tables to the end so that
its figures do not; this measures it. Each round, for each tool: `ingest` loads the
table, it is removed and `sync`ed, the tool's load is timed, and its table is removed
in turn. Several `--ingest` binaries (comma-separated) compare builds. The ratio is
DuckDB's time over each binary's (median of the rounds' ratios).
"""
import argparse, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import INGEST, PY, setup, sh  # noqa: E402
from partitions import BUCKET, DUCK, dataset  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--work", default="/tmp/ingest-bench")
    ap.add_argument("--ingest", default=INGEST, help="binaries to measure, comma-separated "
                    "(default: a fresh release build)")
    ap.add_argument("--out", help="where the tables go (default: under --work)")
    args = ap.parse_args()
    binaries = args.ingest.split(",")
    if binaries == [INGEST]:
        setup()
    data = dataset(args.work, args.rows)
    base = os.path.join(args.out or args.work, "after-removal")
    removed, timed = base + "-removed", base + "-timed"
    load = ["-q", "-p", "country,b", *BUCKET, data]
    tools = {b: (lambda out, b=b: [b, "-t", out, *load]) for b in binaries}
    tools["duckdb"] = lambda out: [PY, "-c", DUCK, data, out, "csv", "country,b"]
    walls = {name: [] for name in tools}
    for _ in range(args.reps):
        for name, command in tools.items():
            subprocess.run([binaries[0], "-t", removed, *load], check=True)
            shutil.rmtree(removed)
            sh(["sync"])
            start = time.perf_counter()
            subprocess.run(command(timed), check=True, stdout=subprocess.DEVNULL)
            walls[name].append(time.perf_counter() - start)
            shutil.rmtree(timed)
            sh(["sync"])
    print("| tool | median | runs | DuckDB ÷ it |")
    print("| --- | ---: | --- | ---: |")
    for name, times in walls.items():
        ratio = statistics.median(d / t for d, t in zip(walls["duckdb"], times))
        runs = " ".join(f"{t:.2f}" for t in times)
        print(f"| {name} | {statistics.median(times):.2f} s | {runs} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
