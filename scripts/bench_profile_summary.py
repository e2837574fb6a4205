#!/usr/bin/env python3
"""Sums a Chrome trace written by `tune-bench --profile FILE` per op name: where a training step spends its time.

    .venv/bin/python scripts/bench_profile_summary.py TRACE.json [OTHER.json] [--top N]

With two traces (e.g. policy off and full) the columns sit side by side with the difference, so the cost of the
recompute shows op by op. Times are inclusive of child ops (an aten::linear includes its aten::matmul).
"""
import argparse
import collections
import json


def totals(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    sums, counts = collections.Counter(), collections.Counter()
    for event in events:
        if event.get("ph") == "X" and "dur" in event:
            sums[event["name"]] += event["dur"] / 1000.0  # microseconds -> ms
            counts[event["name"]] += 1
    return sums, counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    tables = [totals(path) for path in args.traces[:2]]
    names = collections.Counter()
    for sums, _ in tables:
        names.update(sums)
    if len(tables) == 1:
        sums, counts = tables[0]
        print(f"{'op':<45} {'ms':>10} {'calls':>7}")
        for name, ms in sums.most_common(args.top):
            print(f"{name:<45} {ms:>10.1f} {counts[name]:>7}")
        return
    (a, ca), (b, cb) = tables
    print(f"{'op':<45} {'A ms':>9} {'B ms':>9} {'B-A ms':>9} {'A calls':>8} {'B calls':>8}")
    for name in sorted(names, key=lambda n: -abs(b[n] - a[n]))[:args.top]:
        print(f"{name:<45} {a[name]:>9.1f} {b[name]:>9.1f} {b[name] - a[name]:>9.1f} {ca[name]:>8} {cb[name]:>8}")


if __name__ == "__main__":
    main()
