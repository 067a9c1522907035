#!/usr/bin/env python3
"""Deletes one fsync at a time from the durable core (fsutil, publish, journal, manifest),
builds that ingest, and runs the crash-state explorer (tests/crash_states.rs) against it:
every deletion must make some crash state fail. Slow (a build and three explorations per
fsync); run by hand after a change to the order of writes, fsyncs and renames:

    python3 .ci/fsync-deletions.py            # every site; prints caught / MISSED
    python3 .ci/fsync-deletions.py journal    # only sites whose file path contains "journal"
    python3 .ci/fsync-deletions.py fsutil.rs:236: journal.rs:279:   # only these lines

It works in a git worktree of HEAD under target/ with a target directory of its own
(the first build there is a cold one), and runs this checkout's test binary with
EXPLORE_BIN pointing at each mutant."""
import os, re, shutil, subprocess, sys

FILES = ["src/fsutil.rs", "src/storage/local.rs", "src/journal.rs",
         "src/manifest/mod.rs", "src/manifest/segment.rs"]
CALL = re.compile(r"(?:fsutil::)?(?:sync_file|sync_dir|sync_parent|settle|sync_ancestors)\(")

def sites(text):
    """(line index, call start) of every fsync call outside tests and definitions."""
    lines = text.split("\n")
    end = next((i for i, l in enumerate(lines) if l.startswith("#[cfg(test)]")), len(lines))
    for i, line in enumerate(lines[:end]):
        code = line.split("//")[0]
        if "fn " in code:
            continue
        if ".sync_all()" in code:
            yield i, code.index(".sync_all()")
        for m in CALL.finditer(code):
            yield i, m.start()

def delete(line, at):
    """The line with the call at `at` replaced by a no-op of the same type."""
    if line[at:].startswith(".sync_all()"):
        # `handle.sync_all()` (or `handle` on the line above): `handle; Ok(())`.
        return line[:at] + "; Ok::<(), std::io::Error>(())" + line[at + len(".sync_all()"):]
    depth, i = 0, line.index("(", at)
    for j in range(i, len(line)):
        depth += {"(": 1, ")": -1}.get(line[j], 0)
        if depth == 0:
            return line[:at] + "Ok::<(), anyhow::Error>(())" + line[j + 1:]
    raise ValueError(line)

def main():
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wanted = sys.argv[1:]
    env = dict(os.environ, CARGO_INCREMENTAL="0", CARGO_PROFILE_DEV_DEBUG="line-tables-only")
    out = subprocess.run(["cargo", "test", "--no-run", "--test", "tests", "--message-format=json"],
                         cwd=top, env=env, capture_output=True, text=True, check=True).stdout
    tests = [l for l in out.split("\n") if '"executable"' in l and "tests" in l]
    built = re.search(r'"executable":"([^"]+)"', tests[-1]).group(1)
    # A copy: a build in this checkout meanwhile must not swap the binary under us.
    exe = os.path.join(top, "target", "fsync-deletions-tests")
    shutil.copy2(built, exe)
    tree = os.path.join(top, "target", "fsync-deletions")
    if os.path.isdir(tree):
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=top)
    subprocess.run(["git", "worktree", "add", "--detach", tree, "HEAD"], cwd=top, check=True,
                   capture_output=True)
    env["CARGO_TARGET_DIR"] = os.path.join(top, "target", "fsync-deletions-target")
    missed = 0
    try:
        for rel in FILES:
            path = os.path.join(tree, rel)
            original = open(path).read()
            for i, at in sites(original):
                lines = original.split("\n")
                site = f"{rel}:{i + 1}: {lines[i].strip()}"
                if wanted and not any(w in site for w in wanted):
                    continue
                lines[i] = delete(lines[i], at)
                open(path, "w").write("\n".join(lines))
                build = subprocess.run(["cargo", "build", "--bin", "ingest", "--quiet"],
                                       cwd=tree, env=env, capture_output=True, text=True)
                open(path, "w").write(original)
                if build.returncode != 0:
                    print(f"unbuildable  {site}\n{build.stderr[-2000:]}", flush=True)
                    continue
                run = subprocess.run(
                    [exe, "crash_states::power_cuts", "--test-threads", "1", "--nocapture"],
                    env=dict(env, EXPLORE_BIN=os.path.join(env["CARGO_TARGET_DIR"], "debug", "ingest")),
                    cwd=top, capture_output=True, text=True)
                figures = [l for l in run.stderr.split("\n") if "crash states made" in l]
                failed = sum(int(re.search(r"(\d+) failed", l).group(1)) for l in figures)
                if failed > 0:
                    verdict = "caught"
                elif run.returncode == 0:
                    verdict = "MISSED"
                else:
                    verdict = "error"
                missed += verdict != "caught"
                print(f"{verdict:12} {site}  ({failed} failing states)", flush=True)
                if verdict == "error":
                    print(run.stderr[-3000:], flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=top)
    sys.exit(1 if missed else 0)

if __name__ == "__main__":
    main()
