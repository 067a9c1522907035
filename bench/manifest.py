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

With `--jobs N` (issue 40.3), each history is measured once more with N jobs in the
table: the job's state copied to N - 1 more jobs (each then holds H loaded inputs too),
so a run's new inputs are also looked up in N - 1 other manifests, as exactly-once per
table asks. An old build (`--old`) does not look, which gives the single-job figure.

With `--s3`, the same histories are measured as tables in a bucket: SeaweedFS started on
127.0.0.1 by `.ci/s3-store`, each history's job state (manifest head and segments, as a
working copy holds them) put into the bucket, and the two runs made on a fresh machine
(an empty INGEST_WORK_DIR) each time, the case of a cron job in a new container. Besides
time and memory it reports what the run downloaded (the bytes it read from sockets, from
an `strace` of a fourth run) against the size of the segments: what a machine that
copied the segments whole would have downloaded before it looked anything up.
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


def timed_env(cmd, env):
    """(wall s, peak RSS MiB) of cmd."""
    stats = "/tmp/ingest-manifest-bench.time"
    start = time.perf_counter()
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", stats, *cmd], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - start
    return wall, int(open(stats).read().split()[-1]) / 1024


def received(cmd, env):
    """Bytes cmd read from sockets (its downloads), from an strace of its reads."""
    trace = "/tmp/ingest-manifest-bench.strace"
    subprocess.run(["strace", "-f", "-qq", "-y", "-e", "trace=read,recvfrom,recvmsg", "-o", trace, *cmd],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    total = 0
    with open(trace) as f:
        for line in f:
            if "socket:[" in line and "= " in line:
                tail = line.rsplit("= ", 1)[1].split()[0]
                if tail.isdigit():
                    total += int(tail)
    return total


def measure_s3(table, work, history, n):
    """The two runs on fresh machines against history `history` put in the bucket."""
    import boto3
    env_in = os.environ
    bucket = env_in["INGEST_TEST_S3_BUCKET"]
    client = boto3.client("s3", endpoint_url=env_in["INGEST_TEST_S3_ENDPOINT"],
                          aws_access_key_id=env_in["INGEST_TEST_S3_KEY_ID"],
                          aws_secret_access_key=env_in["INGEST_TEST_S3_SECRET"],
                          region_name="us-east-1")
    state = os.path.join(table, "_ingest")
    segments = 0
    fresh = os.path.join(work, "fresh")
    make_dir(fresh, 90_000_000, 1_000)
    loaded = os.path.join(work, "inputs", "d0000")
    results, downloads = {"new": [], "reoffer": []}, {}
    for rep in range(4):
        prefix = f"manifest-{history}-{n}-{rep}"
        if os.path.isdir(state):
            for d, _, fs in os.walk(state):
                for f in fs:
                    if f.startswith(".") or f in ("lock", "journal"):
                        continue
                    full = os.path.join(d, f)
                    rel = os.path.relpath(full, table)
                    client.upload_file(full, bucket, f"{prefix}/{rel}")
                    if f.endswith(".seg"):
                        segments += os.path.getsize(full) if rep == 0 else 0
        env = dict(env_in, AWS_ENDPOINT_URL=env_in["INGEST_TEST_S3_ENDPOINT"], AWS_ALLOW_HTTP="true",
                   AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID=env_in["INGEST_TEST_S3_KEY_ID"],
                   AWS_SECRET_ACCESS_KEY=env_in["INGEST_TEST_S3_SECRET"])
        url = f"s3://{bucket}/{prefix}"
        for kind, inputs in (("new", fresh), ("reoffer", loaded)):
            if kind == "reoffer" and not history:
                continue
            env["INGEST_WORK_DIR"] = os.path.join(work, f"machine-{prefix}-{kind}")
            shutil.rmtree(env["INGEST_WORK_DIR"], ignore_errors=True)
            cmd = [INGEST, "-q", "-t", url, inputs]
            if rep < 3:
                results[kind].append(timed_env(cmd, env))
            else:
                downloads[kind] = received(cmd, env)
    out = {}
    for kind, rs in results.items():
        if rs:
            out[kind] = (statistics.median(r[0] for r in rs), max(r[1] for r in rs), downloads[kind])
    return out, segments


def main_s3(args, histories):
    print(f"## Manifest cost against history, table in a bucket, fresh machine "
          f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, SeaweedFS on 127.0.0.1)\n")
    print("| loaded inputs (history) | segments in the bucket MiB | new 1,000 files: s | RSS MiB | "
          "downloaded MiB | re-offer 10,000 loaded: s | RSS MiB | downloaded MiB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    table = os.path.join(args.work, "table-s3-history")
    shutil.rmtree(table, ignore_errors=True)
    loaded = 0
    for n, history in enumerate(histories):
        while loaded < history:
            d = os.path.join(args.work, "inputs", f"d{loaded // PER_RUN:04d}")
            make_dir(d, loaded, PER_RUN)
            sh([INGEST, "-q", "-t", table, d], stdout=subprocess.DEVNULL)
            loaded += PER_RUN
        m, segments = measure_s3(table, args.work, history, n)
        new = m["new"]
        re = m.get("reoffer", (float("nan"),) * 3)
        mib = 1024 * 1024
        print(f"| {history:,} | {segments / mib:.1f} | {new[0]:.2f} | {new[1]:.0f} | {new[2] / mib:.2f} | "
              f"{re[0]:.2f} | {re[1]:.0f} | {re[2] / mib:.2f} |")
        sys.stdout.flush()
    shutil.rmtree(table, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--histories", default="0,100000,1000000")
    ap.add_argument("--old", help="an ingest built before manifest segments, for comparison")
    ap.add_argument("--old-max", type=int, default=100_000, help="largest history built with --old")
    ap.add_argument("--work", default="/tmp/ingest-manifest-bench")
    ap.add_argument("--ingest", help="measure this binary instead of building target/release/ingest")
    ap.add_argument("--jobs", type=int, default=1, help="also measure with this many jobs in the table")
    ap.add_argument("--s3", action="store_true", help="the table in a bucket, on fresh machines")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    histories = [int(h) for h in args.histories.split(",")]
    if args.s3 and not args.inside:
        sh(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=ROOT)
        # The store lives as long as this shell (.ci/s3-store stops it on exit); the
        # measuring runs in its venv, which has boto3.
        script = ('. .ci/s3-store && "$INGEST_TEST_S3_PYTHON" bench/manifest.py --s3 --inside '
                  f'--histories {args.histories} --work "{args.work}"')
        sys.exit(subprocess.run(["bash", "-c", script], cwd=ROOT).returncode)
    if args.s3:
        os.makedirs(args.work, exist_ok=True)
        return main_s3(args, histories)
    if args.ingest:
        binary = os.path.abspath(args.ingest)
    else:
        sh(["cargo", "build", "--release", "--quiet", "--bin", "ingest"], cwd=ROOT)
        binary = INGEST
    os.makedirs(args.work, exist_ok=True)
    builds = [("this build", binary, max(histories))]
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
            if args.jobs > 1 and history:
                state = os.path.join(table, "_ingest")
                clones = [os.path.join(state, f"job{j}") for j in range(1, args.jobs)]
                for clone in clones:
                    shutil.copytree(os.path.join(state, "default"), clone,
                                    ignore=shutil.ignore_patterns("lock", "journal"))
                m = measure(binary, table, args.work, history)
                new_s, new_rss = m["new"]
                re_s, re_rss = m.get("reoffer", (float("nan"), float("nan")))
                print(f"| {label}, {args.jobs} jobs | {history:,} each | {new_s:.2f} | {new_rss:.0f} | "
                      f"{re_s:.2f} | {re_rss:.0f} | |")
                sys.stdout.flush()
                for clone in clones:
                    shutil.rmtree(clone)
        shutil.rmtree(table, ignore_errors=True)


if __name__ == "__main__":
    main()
