"""Write data/examples/dates.jsonl: the example task of the README's "Your own data" section.

Each line turns an ISO date into words, a small string transformation (copy the digits, drop a leading
zero, look up the month's name) that a 4-layer byte model learns in a few CPU minutes:

    {"prompt": "2031-07-04 = ", "target": "4 July 2031"}

500 lines, dates drawn uniformly from 1900-01-01 .. 2099-12-31 with random.Random(0), no date twice.
Deterministic and generated here (no third-party data): `python data/examples/make_dates.py` rewrites the
file byte for byte.
"""
import datetime
import json
import os
import random

N = 500
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]


def make(n: int = N, seed: int = 0) -> list[dict]:
    rng, first = random.Random(seed), datetime.date(1900, 1, 1)
    span = (datetime.date(2099, 12, 31) - first).days
    days = rng.sample(range(span + 1), n)                       # distinct dates
    out = []
    for d in (first + datetime.timedelta(days=k) for k in days):
        out.append({"prompt": f"{d.isoformat()} = ", "target": f"{d.day} {MONTHS[d.month - 1]} {d.year}"})
    return out


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dates.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(ex, allow_nan=False) + "\n" for ex in make())
    print(f"wrote {N} examples to {path}")
