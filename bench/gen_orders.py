#!/usr/bin/env python3
"""Deterministic, realistic orders data for benchmarks.

    gen_orders.py OUT_DIR --mb 100 [--files 4] [--seed 1] [--shape quoted|plain]
    gen_orders.py OUT_DIR --rows 1000000 [--customer-id]

Columns: order_id, ts, dt, customer, email, country (~40 values), amount, currency,
status, note. About 30 days of timestamps; quoted fields with commas, quotes and
newlines; some unicode. The same arguments always give the same bytes.

`--shape plain` is the second data shape: the same columns and value mix, but names and
notes without commas, quotes or line ends, so no field is quoted, as in most machine
exports (the default shape quotes about half the records).

`--customer-id` adds a last column, customer_id (uniform over 100,000 customers), for
loads partitioned by a customer bucket (bench/partitions.py); without it the bytes are
those of earlier versions.
"""
import argparse, csv, os, random

COUNTRIES = ["US", "DE", "FR", "JP", "BR", "IN", "GB", "CH", "CA", "AU", "MX", "ES", "IT",
             "NL", "SE", "NO", "DK", "FI", "PL", "PT", "IE", "AT", "BE", "CZ", "GR", "HU",
             "RO", "TR", "IL", "AE", "SA", "ZA", "NG", "EG", "KR", "CN", "SG", "TH", "VN", "AR"]
NAMES = ["Ada Lovelace", "Zoë Müller", "José Ñúñez", "李雷", "O'Brien, Pat", "Renée \"Ren\" Roy",
         "Søren Kierkegaard", "Ярослава", "Amélie Poulain", "Grace Hopper", "Alan Turing"]
NOTES = ["", "", "", "gift wrap", "leave at door, ring twice", 'says "urgent"',
         "line one\nline two", "café ☕ order", "comma, quote \" and\nnewline", "N/A"]
PLAIN_NAMES = [n.replace(",", "").replace('"', "") for n in NAMES]
PLAIN_NOTES = [n.replace(",", ";").replace('"', "'").replace("\n", " ") for n in NOTES]
STATUS = ["paid", "shipped", "delivered", "refunded", "cancelled"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mb", type=float)
    ap.add_argument("--rows", type=int)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shape", choices=["quoted", "plain"], default="quoted")
    ap.add_argument("--customer-id", action="store_true")
    args = ap.parse_args()
    names, notes = (NAMES, NOTES) if args.shape == "quoted" else (PLAIN_NAMES, PLAIN_NOTES)
    if (args.mb is None) == (args.rows is None):
        ap.error("give exactly one of --mb and --rows")
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    budget = int(args.mb * 1e6) if args.mb is not None else None
    rows_left = args.rows
    per_file_bytes = budget // args.files if budget else None
    per_file_rows = -(-args.rows // args.files) if args.rows else None
    oid = 10_000_000
    for f in range(args.files):
        path = os.path.join(args.out, f"orders-{f:03d}.csv")
        with open(path, "w", newline="", encoding="utf-8") as out:
            w = csv.writer(out, lineterminator="\n")
            w.writerow(["order_id", "ts", "dt", "customer", "email", "country", "amount",
                        "currency", "status", "note"] + (["customer_id"] if args.customer_id else []))
            written = 0
            while True:
                if per_file_rows is not None and (written >= per_file_rows or rows_left <= 0):
                    break
                if per_file_bytes is not None and out.tell() >= per_file_bytes:
                    break
                day = 1 + rng.randrange(30)
                ts = f"2026-10-{day:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z"
                name = rng.choice(names)
                w.writerow([oid, ts, f"2026-10-{day:02d}", name, f"user{rng.randrange(10**6)}@example.com",
                            rng.choice(COUNTRIES), f"{rng.randrange(100, 1000000) / 100:.2f}",
                            rng.choice(("EUR", "USD", "JPY")), rng.choice(STATUS), rng.choice(notes)]
                           + ([rng.randrange(100_000)] if args.customer_id else []))
                oid += 1
                written += 1
                if rows_left is not None:
                    rows_left -= 1


if __name__ == "__main__":
    main()
