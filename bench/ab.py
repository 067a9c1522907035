#!/usr/bin/env python3
"""A/B of `ingest` builds: the plain load against the four-stage pipeline, alternated.

    python3 bench/ab.py [--mb 1000] [--rounds 4] [--modes plain,pipeline] BINARY [BINARY…]

Each round runs every binary twice on the bench data set of `--mb` MB (made by
bench/bench.py or bench/gen_orders.py under --work): the plain load (`-p country`) and
the pipeline of bench.py's `ingest-pipeline` (cast amount and ts, derive dt = date(ts),
drop email, dedupe by order_id). Before each run the output is deleted and `sync`ed,
untimed, and the inputs are read into the page cache (with --cold, the page cache is
emptied instead; with --one-core, every run is pinned to core 0). Per binary it prints the median wall time and CPU time (user + system) of each
mode and the median over rounds of pipeline ÷ plain in the same round.

`--modes` runs other loads too, each against the plain one in the same round, to see
what each stage costs: rename (a stage thread that changes nothing), cast (amount and
ts), castderive (cast, then dt = date(ts)), drop (email), dedupe (order_id), constant
(a derived constant column), parquet (Parquet parts, zstd), delta (a Delta table) and
daily (`-p country,dt`, about 1,200 partitions).

It is how the commits of issue 4 compared a change against the build before it: copy
the old binary aside (cp target/release/ingest /tmp/ingest-old), build the new one, and
give both. On a shared two-core VM single runs swing by 10-20%: compare medians of
alternated rounds, never single timings.
"""
import argparse, os, resource, shutil, statistics, subprocess, sys, time

from bench import check_cold, drop_cache, warm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAST = ["--cast", "amount=decimal(12,2)", "--cast", "ts=timestamp"]
PIPELINE = CAST + ["--derive", "dt=date(ts)", "--drop", "email", "--dedupe-key", "order_id"]
MODES = {
    "plain": [],
    "pipeline": PIPELINE,
    "rename": ["--rename", "note=memo"],
    "cast": CAST,
    "castderive": CAST + ["--derive", "dt=date(ts)"],
    "drop": ["--drop", "email"],
    "dedupe": ["--dedupe-key", "order_id"],
    "constant": ["--derive", "k='v'"],
    "parquet": ["--format", "parquet"],
    "delta": ["--table-format", "delta"],
    # ~1,200 partitions (40 countries x 30 days): the cost of many partitions' fsyncs.
    "daily": ["-p", "country,dt"],
}


def run(cmd, out, cold):
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["sync"], check=True)
    if cold:
        drop_cache()
    else:
        warm(arg for arg in cmd[1:] if arg != out and os.path.exists(arg))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(cmd, check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--mb", type=int, default=1000)
    ap.add_argument("--shape", choices=["quoted", "plain"], default="quoted",
                    help="gen_orders.py's data shape: quoted (about half the records) or plain")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--work", default="/tmp/ingest-bench")
    ap.add_argument("--modes", default="plain,pipeline", help=f"comma-separated, of: {', '.join(MODES)}")
    ap.add_argument("--cold", action="store_true",
                    help="start every run with an empty page cache (root only) instead of warm inputs")
    ap.add_argument("--one-core", action="store_true", help="pin every run to core 0 (taskset -c 0)")
    args = ap.parse_args()
    if args.cold:
        check_cold(ap)
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(MODES)}")
    if "plain" not in modes:
        modes.insert(0, "plain")
    suffix = "" if args.shape == "quoted" else f"-{args.shape}"
    data = os.path.join(args.work, f"data-{args.mb}MB{suffix}")
    marker = os.path.join(data, ".complete")  # as bench.py leaves it
    if not os.path.exists(marker):
        shutil.rmtree(data, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(ROOT, "bench/gen_orders.py"), data, "--mb", str(args.mb),
                        "--files", "4", "--shape", args.shape], check=True)
        open(marker, "w").close()
    out = os.path.join(args.work, "ab-out")
    results = {}
    for _ in range(args.rounds):
        for binary in args.binaries:
            for mode in modes:
                extra = MODES[mode]
                partition = [] if "-p" in extra else ["-p", "country"]
                cmd = [binary, "-q", "-t", out, *partition, *extra, data]
                pin = ["taskset", "-c", "0"] if args.one_core else []
                results.setdefault((binary, mode), []).append(run(pin + cmd, out, args.cold))
    shutil.rmtree(out, ignore_errors=True)
    med = statistics.median
    for binary in args.binaries:
        plain = results[(binary, "plain")]
        print(f"{binary}: plain {med(w for w, _ in plain):.2f} s ({med(c for _, c in plain):.2f} core-s)")
        for mode in modes[1:]:
            runs = results[(binary, mode)]
            ratios = [p[0] / q[0] for p, q in zip(runs, plain)]
            print(f"  {mode} {med(w for w, _ in runs):.2f} s ({med(c for _, c in runs):.2f} core-s), "
                  f"{mode} / plain {med(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")

if __name__ == "__main__":
    main()
