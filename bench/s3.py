#!/usr/bin/env python3
"""Loading into a table in a bucket (issue 14): `ingest` against pyarrow's
`write_dataset`, same CSV, same partitioning, same store, same run.

    python3 bench/s3.py [--mb 1000] [--reps 3] [--format csv|parquet] [--work /tmp/ingest-bench]

Starts SeaweedFS on 127.0.0.1 through `.ci/s3-store` (which installs it, with pyarrow,
into target/s3-venv), generates the orders data set (bench/gen_orders.py, 4 files), then
alternates the two tools `--reps` times (A B, B A, ...), each into a fresh prefix:

  ingest    --target s3://BUCKET/PREFIX --partition-by country (exactly-once on: open
            multipart uploads completed at each checkpoint, journal and lease in the
            bucket)
  pyarrow   pyarrow.dataset.write_dataset(CSV in, all columns strings, quoted newlines
            allowed) to S3FileSystem, Hive partitioning by country

Both write `--format` (csv, or parquet: ingest's zstd against pyarrow's default snappy).

Both tools share the store, and the store shares the machine's cores: its CPU time is
part of every figure, and is printed beside each tool's own (SeaweedFS spends about
14 CPU seconds per GB it is sent, so on 2 cores it alone takes 7 s of a 1 GB load). Prints median wall time, MB/s, peak RSS and the median over rounds
of pyarrow's time / ingest's time (above 1: ingest faster). Then ingest's peak RSS at a
tenth of the size and at the full size, to show memory does not grow with the input.
"""
import argparse, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INGEST = os.path.join(ROOT, "target/release/ingest")
sys.path.insert(0, os.path.join(ROOT, "bench"))

PYARROW = r'''
import os, sys, time
import pyarrow as pa, pyarrow.csv as pcsv, pyarrow.dataset as ds
from pyarrow import fs
from urllib.parse import urlparse
url = urlparse(os.environ["INGEST_TEST_S3_ENDPOINT"])
s3 = fs.S3FileSystem(access_key=os.environ["INGEST_TEST_S3_KEY_ID"],
                     secret_key=os.environ["INGEST_TEST_S3_SECRET"],
                     endpoint_override=url.netloc, scheme=url.scheme, region="us-east-1")
out_format, files = sys.argv[2], sys.argv[3:]
with open(files[0]) as f:
    columns = f.readline().strip().split(",")
fmt = ds.CsvFileFormat(
    parse_options=pcsv.ParseOptions(newlines_in_values=True),
    convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in columns}))
ds.write_dataset(ds.dataset(files, format=fmt), base_dir=sys.argv[1], filesystem=s3,
                 format=out_format, partitioning=["country"], partitioning_flavor="hive")
'''

DELETE = r'''
import os, sys
from pyarrow import fs
from urllib.parse import urlparse
url = urlparse(os.environ["INGEST_TEST_S3_ENDPOINT"])
s3 = fs.S3FileSystem(access_key=os.environ["INGEST_TEST_S3_KEY_ID"],
                     secret_key=os.environ["INGEST_TEST_S3_SECRET"],
                     endpoint_override=url.netloc, scheme=url.scheme, region="us-east-1")
s3.delete_dir(sys.argv[1])
'''


def store_cpu():
    """CPU seconds the store has used so far."""
    with open(f"/proc/{os.environ['INGEST_TEST_S3_PID']}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(cmd, env):
    """Wall seconds, peak RSS (MiB), the tool's CPU seconds and the store's, of `cmd`."""
    start, store = time.time(), store_cpu()
    out = subprocess.run(["/usr/bin/time", "-f", "%M %U %S"] + cmd, env=env, capture_output=True,
                         text=True)
    wall, store = time.time() - start, store_cpu() - store
    if out.returncode != 0:
        sys.exit(f"{cmd[0]} failed: {out.stderr}")
    rss, user, system = out.stderr.strip().splitlines()[-1].split()
    return wall, int(rss) / 1024, float(user) + float(system), store


def inside(args):
    from bench import dataset
    python = os.environ["INGEST_TEST_S3_PYTHON"]
    bucket = os.environ["INGEST_TEST_S3_BUCKET"]
    env = dict(os.environ,
               AWS_ENDPOINT_URL=os.environ["INGEST_TEST_S3_ENDPOINT"], AWS_ALLOW_HTTP="true",
               AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID=os.environ["INGEST_TEST_S3_KEY_ID"],
               AWS_SECRET_ACCESS_KEY=os.environ["INGEST_TEST_S3_SECRET"],
               INGEST_WORK_DIR=os.path.join(args.work, "s3-working-copy"))
    subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=ROOT, check=True)

    def run(tool, files, prefix):
        if tool == "ingest":
            return timed([INGEST, "-q", "-t", f"s3://{bucket}/{prefix}", "-p", "country",
                          "--format", args.format] + files, env)
        return timed([python, "-c", PYARROW, f"{bucket}/{prefix}", args.format] + files, env)

    def clean(prefix):
        subprocess.run([python, "-c", DELETE, f"{bucket}/{prefix}"], env=env, check=True)

    _, files, size = dataset(args.work, args.mb)
    results = {"ingest": [], "pyarrow": []}
    ratios = []
    for rep in range(args.reps):
        order = ["ingest", "pyarrow"] if rep % 2 == 0 else ["pyarrow", "ingest"]
        times = {}
        for tool in order:
            prefix = f"bench-{tool}-{rep}"
            subprocess.run(["sync"])
            wall, rss, cpu, store = run(tool, files, prefix)
            times[tool] = wall
            results[tool].append((wall, rss, cpu, store))
            print(f"  round {rep + 1}: {tool:8} {wall:7.2f} s  {rss:7.0f} MiB  CPU s: {cpu:5.1f} "
                  f"tool, {store:5.1f} store", file=sys.stderr)
            clean(prefix)
        ratios.append(times["pyarrow"] / times["ingest"])
    mb = size / 1e6
    print(f"\n{mb:.0f} MB of CSV in {len(files)} files into SeaweedFS as {args.format}, "
          f"--partition-by country, {args.reps} rounds")
    print(f"{'tool':10} {'median s':>9} {'MB/s':>7} {'peak RSS MiB':>13} {'tool CPU s':>11} "
          f"{'store CPU s':>12}")
    for tool, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        rss = max(r[1] for r in runs)
        cpu = statistics.median(r[2] for r in runs)
        store = statistics.median(r[3] for r in runs)
        print(f"{tool:10} {wall:9.2f} {mb / wall:7.1f} {rss:13.0f} {cpu:11.1f} {store:12.1f}")
    print(f"pyarrow time / ingest time, median over rounds: {statistics.median(ratios):.2f}x "
          f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})")

    small_mb = max(args.mb // 10, 10)
    _, small, _ = dataset(args.work, small_mb)
    _, rss_small, _, _ = run("ingest", small, "bench-ingest-small")
    clean("bench-ingest-small")
    print(f"ingest peak RSS: {rss_small:.0f} MiB at {small_mb} MB, "
          f"{max(r[1] for r in results['ingest']):.0f} MiB at {args.mb} MB")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--format", choices=["csv", "parquet"], default="csv")
    ap.add_argument("--work", default="/tmp/ingest-bench")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside:
        return inside(args)
    os.makedirs(args.work, exist_ok=True)
    # The store lives as long as this shell: .ci/s3-store stops it on exit (so no
    # `exec`, which would skip that trap).
    script = ('. .ci/s3-store && python3 bench/s3.py --inside '
              f'--mb {args.mb} --reps {args.reps} --format {args.format} --work "{args.work}"')
    sys.exit(subprocess.run(["bash", "-c", script], cwd=ROOT).returncode)


if __name__ == "__main__":
    main()
