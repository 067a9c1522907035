#!/usr/bin/env python3
"""The manifest's cost against the job's history (issue 14): a run should cost what it
is offered, not what the job loaded before.

    python3 bench/manifest.py [--histories 0,100000,1000000] [--old PATH] [--work DIR]

Builds a job whose manifest holds H loaded inputs (tiny CSV files, 10,000 per run, each
run one directory), and at each H in --histories measures, with /usr/bin/time:

  new      a run offered 1,000 files never loaded (reads them, loads them)
  re-offer a run offered 10,000 files already loaded (finds them all loaded)

Both are medians of 3 (the `new` run's files are removed from the table's manifest by
loading them into a fresh copy each time: it runs on a copy of the table). With
`--old PATH` (an ingest built before segments, e.g. from git worktree), the same
histories are built and measured with it too, up to the largest H it can do in
reasonable time. Files live under --work (1,000,000 files take ~4 GB of inodes).
"""
import argparse, os, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INGEST = os.path.join(ROOT, "target/release/ingest")
PER_RUN = 10_000


def sh(cmd, **kw):
    subprocess.run(cmd, check=True, **kw)


def make_dir(path, first, n):
    if os.path.exists(os.path.join(path, ".complete")):
        return
    os.makedirs(path, exist_ok=True)
    for i in range(first, first + n):
        with open(os.path.join(path, f"f{i:08d}.csv"), "w") as f:
            f.write(f"id,v\n{i},{i * 7 % 1000}\n")
    open(os.path.join(path, ".complete"), "w").close()


def timed(cmd):
    stats = "/tmp/ingest-manifest-bench.time"
    start = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", stats, *cmd], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    return wall, int(open(stats).read().split()[-1]) / 1024


def measure(binary, table, work, history):
    """Medians of 3 for the two runs, on copies of the table."""
    fresh = os.path.join(work, "fresh")
    make_dir(fresh, 90_000_000, 1_000)
    loaded = os.path.join(work, "inputs", "d0000")
    walls, rss = {"new": [], "reoffer": []}, {"new": [], "reoffer": []}
    for _ in range(3):
        copy = table + ".copy"
        shutil.rmtree(copy, ignore_errors=True)
        if os.path.exists(table):
            shutil.copytree(table, copy, symlinks=True)
        w, m = timed([binary, "-q", "-t", copy, fresh])
        walls["new"].append(w); rss["new"].append(m)
        if history:
            w, m = timed([binary, "-q", "-t", copy, loaded])
            walls["reoffer"].append(w); rss["reoffer"].append(m)
        shutil.rmtree(copy, ignore_errors=True)
    out = {k: (statistics.median(walls[k]), max(rss[k])) for k in walls if walls[k]}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--histories", default="0,100000,1000000")
    ap.add_argument("--old", help="an ingest built before manifest segments, for comparison")
    ap.add_argument("--old-max", type=int, default=100_000, help="largest history built with --old")
    ap.add_argument("--work", default="/tmp/ingest-manifest-bench")
    args = ap.parse_args()
    histories = [int(h) for h in args.histories.split(",")]
    sh(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=ROOT)
    os.makedirs(args.work, exist_ok=True)
    builds = [("this build", INGEST, max(histories))]
    if args.old:
        builds.append(("old build", os.path.abspath(args.old), args.old_max))
    print(f"## Manifest cost against history ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)\n")
    print("| build | loaded inputs (history) | new 1,000 files: s | peak RSS MiB | "
          "re-offer 10,000 loaded: s | peak RSS MiB | building the history: s per 10,000 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, binary, limit in builds:
        table = os.path.join(args.work, "table-" + label.replace(" ", "-"))
        shutil.rmtree(table, ignore_errors=True)
        loaded, build_walls = 0, []
        for history in [h for h in histories if h <= limit]:
            while loaded < history:
                d = os.path.join(args.work, "inputs", f"d{loaded // PER_RUN:04d}")
                make_dir(d, loaded, PER_RUN)
                start = time.perf_counter()
                sh([binary, "-q", "-t", table, d], stdout=subprocess.DEVNULL)
                build_walls.append(time.perf_counter() - start)
                loaded += PER_RUN
            m = measure(binary, table, args.work, history)
            new_s, new_rss = m["new"]
            re_s, re_rss = m.get("reoffer", (float("nan"), float("nan")))
            recent = statistics.median(build_walls[-5:]) if build_walls else float("nan")
            print(f"| {label} | {history:,} | {new_s:.2f} | {new_rss:.0f} | {re_s:.2f} | {re_rss:.0f} | "
                  f"{recent:.2f} |")
            sys.stdout.flush()
        shutil.rmtree(table, ignore_errors=True)


if __name__ == "__main__":
    main()
