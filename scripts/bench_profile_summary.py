#!/usr/bin/env python3
"""Sums a Chrome trace written by `tune-bench --profile FILE` per op name: where a training step spends its time.

    .venv/bin/python scripts/bench_profile_summary.py TRACE.json [OTHER.json] [--top N]

With two traces (e.g. policy off and full) the columns sit side by side with the difference, so the cost of the
recompute shows op by op. Times are inclusive of child ops (an aten::linear includes its aten::matmul).
--cat kernel keeps only GPU kernels (a CUDA trace from tune-bench --device cuda --profile, made by Kineto), whose
times are device times; their names are shortened to --width characters.
"""
import argparse
import collections
import json


def totals(path, category=None, width=45):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    sums, counts = collections.Counter(), collections.Counter()
    for event in events:
        if event.get("ph") == "X" and "dur" in event and (category is None or event.get("cat") == category):
            name = event["name"][:width]
            sums[name] += event["dur"] / 1000.0  # microseconds -> ms
            counts[name] += 1
    return sums, counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--cat", help="only events of this category (kernel: GPU kernels)")
    parser.add_argument("--width", type=int, default=45)
    args = parser.parse_args()
    tables = [totals(path, args.cat, args.width) for path in args.traces[:2]]
    for path, (sums, _) in zip(args.traces, tables):
        print(f"{path}: {sum(sums.values()):.1f} ms in {'all events' if args.cat is None else args.cat + ' events'}")
    names = collections.Counter()
    for sums, _ in tables:
        names.update(sums)
    if len(tables) == 1:
        sums, counts = tables[0]
        print(f"{'op':<{args.width}} {'ms':>10} {'calls':>7}")
        for name, ms in sums.most_common(args.top):
            print(f"{name:<{args.width}} {ms:>10.1f} {counts[name]:>7}")
        return
    (a, ca), (b, cb) = tables
    print(f"{'op':<{args.width}} {'A ms':>9} {'B ms':>9} {'B-A ms':>9} {'A calls':>8} {'B calls':>8}")
    for name in sorted(names, key=lambda n: -abs(b[n] - a[n]))[:args.top]:
        print(f"{name:<{args.width}} {a[name]:>9.1f} {b[name]:>9.1f} {b[name] - a[name]:>9.1f} {ca[name]:>8} {cb[name]:>8}")


if __name__ == "__main__":
    main()
