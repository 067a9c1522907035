#!/usr/bin/env python3
"""The public csv-spectrum corpus: every file loads and reads back exactly.

Usage: spectrum.py INGEST_BINARY CORPUS_DIR WORKDIR

CORPUS_DIR holds csvs/NAME.csv and json/NAME.json (the corpus's expected rows; a one-row
file's JSON is the object itself). The corpus is not part of this repository, so this
runs in CI beside it; `cargo test` covers the same edge cases with fixtures/csv-edges/.
location_coordinates.json disagrees with its own CSV upstream (a phone number), so that
file is compared with the CSV as Python's csv module reads it.
"""
import csv, glob, io, json, os, subprocess, sys

binary, corpus, work = sys.argv[1], sys.argv[2], sys.argv[3]
failures, checked = [], 0


def table_rows(table):
    rows = []
    for path in sorted(glob.glob(os.path.join(table, "**", "*.csv"), recursive=True)):
        if any(part.startswith(("_", ".")) for part in os.path.relpath(path, table).split(os.sep)):
            continue
        with open(path, newline="", encoding="utf-8") as f:
            rows.extend(csv.DictReader(f))
    return rows


def key(rows):
    return sorted(json.dumps(r, sort_keys=True, ensure_ascii=False) for r in rows)


for source in sorted(glob.glob(os.path.join(corpus, "csvs", "*.csv"))):
    name = os.path.splitext(os.path.basename(source))[0]
    table = os.path.join(work, name)
    subprocess.run([binary, "--quiet", "--target", table, source], check=True)
    if name == "location_coordinates":
        with open(source, newline="", encoding="utf-8") as f:
            expected = list(csv.DictReader(f))
    else:
        with open(os.path.join(corpus, "json", name + ".json"), encoding="utf-8") as f:
            expected = json.load(f)
        if isinstance(expected, dict):
            expected = [expected]
    got = table_rows(table)
    if key(got) != key(expected):
        failures.append(f"{name}: read back {got[:2]!r}..., expected {expected[:2]!r}...")
    else:
        print(f"ok   spectrum {name} ({len(got)} rows)")
    checked += 1

if checked < 12:
    failures.append(f"only {checked} corpus files found under {corpus}")
for failure in failures:
    print(f"FAIL {failure}")
print(f"spectrum: {checked - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
