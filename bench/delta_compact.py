#!/usr/bin/env python3
"""Compacting a Delta table of 10,000 small files: `ingest --compact` against the Delta
project's own `DeltaTable.optimize.compact()` (deltalake, delta-rs), same table, same run.

    python3 bench/delta_compact.py [--rows 200000] [--commits 250] [--reps 3] [--ingest BINARY]

The table: `--rows` orders (bench/gen_orders.py, ~40 countries) loaded by ingest with
`--table-format delta -p country --checkpoint-rows rows/commits`, so each of its
`--commits` commits adds a small file to every country: 10,000 files of about 20 rows by
default, the shape a frequent loader leaves. Each round copies that table (`cp -a`,
untimed, then `sync`) and times on the copy, alternating:

- ingest: `ingest -t COPY --compact` (target 128 MiB: each partition's files merged into
  one, each merged file fsynced and read back against the files it replaces, then one
  OPTIMIZE commit with ingest:compact's txn);
- deltalake: `DeltaTable(COPY).optimize.compact(target_size=128 MiB)` (its own OPTIMIZE
  commit, without fsyncs), with pyarrow and deltalake installed into target/bench-venv.

The ratio is deltalake's time over ingest's in each round (median); above 1 means ingest
was faster. Peak RSS of each (median), and the files each left in the latest version.
"""
import argparse, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from delta import INGEST, python  # noqa: E402

TARGET = 128 << 20
# os._exit: the process aborts in its threads' teardown at exit when stdout is a pipe
# ("terminate called without an active exception", deltalake 1.6.6), after its work.
OPTIMIZE = ("import os, sys, deltalake; t = deltalake.DeltaTable(sys.argv[1]); "
            f"print(t.optimize.compact(target_size={TARGET}), flush=True); os._exit(0)")
COUNT = ("import os, sys, deltalake; t = deltalake.DeltaTable(sys.argv[1]); "
         "print(len(t.file_uris()), t.to_pyarrow_table().num_rows, flush=True); os._exit(0)")


def timed(cmd):
    subprocess.run(["sync"], check=True)
    stats = "/tmp/delta-compact-bench.time"
    start = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", stats, *cmd], check=True,
                   stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rss_kb = int(open(stats).read().split()[-1])
    os.remove(stats)
    return wall, rss_kb


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--commits", type=int, default=250)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--work", default="/tmp/ingest-bench")
    ap.add_argument("--ingest", default=INGEST, help="the binary to measure (default: a fresh release build)")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.ingest == INGEST:
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=root, check=True)
    py = python()
    data = os.path.join(args.work, f"orders-{args.rows}-rows")
    if not os.path.exists(os.path.join(data, ".complete")):
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(root, "bench/gen_orders.py"), data, "--rows",
                        str(args.rows), "--files", "4"], check=True)
        open(os.path.join(data, ".complete"), "w").close()
    base = os.path.join(args.work, f"delta-compact-{args.rows}-{args.commits}")
    start = time.perf_counter()
    if not os.path.exists(os.path.join(base, ".complete")):
        shutil.rmtree(base, ignore_errors=True)
        subprocess.run([args.ingest, "-q", "-t", base, "--table-format", "delta", "-p", "country",
                        "--checkpoint-rows", str(args.rows // args.commits), data], check=True)
        open(os.path.join(base, ".complete"), "w").close()
    files, rows = subprocess.run([py, "-c", COUNT, base], check=True, capture_output=True,
                                 text=True).stdout.split()
    print(f"table: {int(files):,} files, {int(rows):,} rows, {args.commits} commits "
          f"(loaded in {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    copy = base + "-copy"
    walls, rss, left = {"ingest": [], "deltalake": []}, {"ingest": [], "deltalake": []}, {}
    for _ in range(args.reps):
        for tool in ("ingest", "deltalake"):
            shutil.rmtree(copy, ignore_errors=True)
            subprocess.run(["cp", "-a", base, copy], check=True)
            cmd = ([args.ingest, "-q", "-t", copy, "--compact"] if tool == "ingest"
                   else [py, "-c", OPTIMIZE, copy])
            wall, kb = timed(cmd)
            walls[tool].append(wall)
            rss[tool].append(kb)
            after = subprocess.run([py, "-c", COUNT, copy], check=True, capture_output=True,
                                   text=True).stdout.split()
            assert after[1] == rows, f"{tool} changed the row count: {after[1]} != {rows}"
            left[tool] = int(after[0])
    ratio = statistics.median(d / i for d, i in zip(walls["deltalake"], walls["ingest"]))
    print("| tool | compaction | peak RSS | files after |")
    print("| --- | ---: | ---: | ---: |")
    for tool in ("ingest", "deltalake"):
        print(f"| {tool} | {statistics.median(walls[tool]):.2f} s "
              f"| {statistics.median(rss[tool]) / 1024:.0f} MiB | {left[tool]:,} |")
    print(f"\ndeltalake ÷ ingest: {ratio:.2f}x (files before: {int(files):,})")
    shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    main()
