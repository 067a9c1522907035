#!/usr/bin/env python3
"""Loading into a Delta Lake table on local disk (issue 15): `ingest --table-format delta`
against the Delta project's Python package, and against ingest's own plain Parquet load,
same CSV, same partitioning, same run.

    python3 bench/delta.py [--mb 1000] [--reps 3] [--codec zstd|snappy] [--work /tmp/ingest-bench]

Installs `deltalake` and pyarrow into target/bench-venv, generates the orders data set
(bench/gen_orders.py, 4 files), then alternates the three loads `--reps` times, each into
a fresh directory:

  delta     ingest --table-format delta --partition-by country (exactly-once on: one
            Delta commit per checkpoint with its txn, journal, fsyncs)
  parquet   ingest --format parquet --partition-by country (a Hive table of Parquet)
  deltalake deltalake.write_deltalake of pyarrow's CSV reader's batches (all columns
            strings, quoted newlines allowed), partition_by country

All three compress with the same codec, `--codec` (default zstd at level 1, ingest's
default; delta-rs's own default is snappy, so `--codec snappy` is the rival untouched).

Prints median wall time, MB/s and peak RSS per tool, the median over rounds of
deltalake's time / delta's (above 1: ingest faster) and delta's time / parquet's (the
cost of the Delta log over a plain load), then ingest's peak RSS at a tenth and at
three tenths of the size and at the full size, to show memory does not grow with the
input. (It grows with `--checkpoint-rows` instead: a checkpoint's Parquet parts are open
until it ends. A tenth of the default 1 GB is less than one checkpoint of 1,000,000
rows, so it peaks lower than the rest.)
"""
import argparse, os, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INGEST = os.path.join(ROOT, "target/release/ingest")
VENV = os.path.join(ROOT, "target/bench-venv")
sys.path.insert(0, os.path.join(ROOT, "bench"))

WRITE_DELTALAKE = r'''
import sys
import pyarrow as pa, pyarrow.csv as pcsv, pyarrow.dataset as ds
from deltalake import WriterProperties, write_deltalake
codec = sys.argv[2]
files = sys.argv[3:]
with open(files[0]) as f:
    columns = f.readline().strip().split(",")
fmt = ds.CsvFileFormat(
    parse_options=pcsv.ParseOptions(newlines_in_values=True),
    convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in columns}))
data = ds.dataset(files, format=fmt)
stream = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
props = WriterProperties(compression=codec.upper(),
                         compression_level=1 if codec == "zstd" else None)
write_deltalake(sys.argv[1], stream, partition_by=["country"], writer_properties=props)
'''


def python():
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
    if subprocess.run([py, "-c", "import deltalake, pyarrow"], capture_output=True).returncode:
        subprocess.run([py, "-m", "pip", "install", "--quiet", "deltalake", "pyarrow"], check=True)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--codec", choices=["zstd", "snappy"], default="zstd")
    ap.add_argument("--work", default="/tmp/ingest-bench")
    args = ap.parse_args()
    from bench import dataset, warm
    py = python()
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=ROOT, check=True)
    os.makedirs(args.work, exist_ok=True)
    _, files, size = dataset(args.work, args.mb)

    def run(tool, files, out):
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["sync"])
        warm(files)
        codec = ["--compression", args.codec]
        if tool == "delta":
            cmd = [INGEST, "-q", "-t", out, "--table-format", "delta", "-p", "country"] + codec + files
        elif tool == "parquet":
            cmd = [INGEST, "-q", "-t", out, "--format", "parquet", "-p", "country"] + codec + files
        else:
            cmd = [py, "-c", WRITE_DELTALAKE, out, args.codec] + files
        result = timed(cmd)
        shutil.rmtree(out, ignore_errors=True)
        return result

    tools = ["delta", "parquet", "deltalake"]
    results = {t: [] for t in tools}
    versus, overhead = [], []
    for rep in range(args.reps):
        order = tools if rep % 2 == 0 else tools[::-1]
        times = {}
        for tool in order:
            wall, rss, cpu = run(tool, files, os.path.join(args.work, f"out-{tool}"))
            times[tool] = wall
            results[tool].append((wall, rss, cpu))
            print(f"  round {rep + 1}: {tool:9} {wall:7.2f} s  {rss:7.0f} MiB  {cpu:6.1f} CPU s",
                  file=sys.stderr)
        versus.append(times["deltalake"] / times["delta"])
        overhead.append(times["delta"] / times["parquet"])
    mb = size / 1e6
    print(f"\n{mb:.0f} MB of CSV in {len(files)} files, --partition-by country, {args.codec}, "
          f"local disk, {args.reps} rounds")
    print(f"{'tool':10} {'median s':>9} {'MB/s':>7} {'peak RSS MiB':>13} {'CPU s':>7}")
    for tool, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        print(f"{tool:10} {wall:9.2f} {mb / wall:7.1f} {max(r[1] for r in runs):13.0f} "
              f"{statistics.median(r[2] for r in runs):7.1f}")
    print(f"deltalake time / ingest delta time, median over rounds: {statistics.median(versus):.2f}x "
          f"(rounds: {', '.join(f'{r:.2f}' for r in versus)})")
    print(f"ingest delta time / ingest parquet time, median over rounds: "
          f"{statistics.median(overhead):.2f}x (rounds: {', '.join(f'{r:.2f}' for r in overhead)})")
    peaks = []
    for part in (10, 3):
        small_mb = max(args.mb // part, 10)
        _, small, _ = dataset(args.work, small_mb)
        _, rss_small, _ = run("delta", small, os.path.join(args.work, "out-small"))
        peaks.append(f"{rss_small:.0f} MiB at {small_mb} MB")
    peaks.append(f"{max(r[1] for r in results['delta']):.0f} MiB at {args.mb} MB")
    print(f"ingest delta peak RSS: {', '.join(peaks)}")

if __name__ == "__main__":
    main()
