"""What the interop scripts share: a check that records failures instead of stopping at
the first, the end of a run that reports them, and the fixtures read as Python's csv
module reads them (independently of ingest)."""
import csv, gzip, io, sys

failures = []


def check(what, got, want, reader="got"):
    if got != want:
        if isinstance(got, list) and isinstance(want, list):
            diff = [(g, w) for g, w in zip(got, want) if g != w][:3]
            failures.append(f"{what}: {len(got)} vs {len(want)} items; first differences {diff!r}")
        else:
            failures.append(f"{what}: {reader} {str(got)[:500]}, expected {str(want)[:500]}")
    else:
        print(f"ok   {what}")


def finish(name):
    if failures:
        print("\n".join("FAILED " + f for f in failures), file=sys.stderr)
        sys.exit(1)
    print(f"{name}: all checks passed")


def rows_of(path):
    raw = open(path, "rb").read()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8"), newline="")))
