#!/usr/bin/env python3
"""Tables for the checkpointing benchmark: reads the JSON lines tune-bench and bench_pytorch_llama.py printed
(collected by scripts/bench_checkpointing.sh), prints Markdown tables and the issue's targets, and writes
everything as JSON. Standard library only.

    bench_checkpointing_report.py RAW.jsonl --out RESULTS.json [--compare LAYERS:SEQ]
"""
import argparse
import json
import math
import statistics
import sys
from collections import defaultdict

MIB = 2 ** 20
POLICY_ORDER = ["off", "full", "every_k", "sqrt", "selective"]


def load(path):
    rows = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def merge_repeats(rows):
    """One row per (tool, policy, layers, seq): medians over repeated rounds."""
    groups = defaultdict(list)
    for row in rows:
        groups[(row.get("tool"), row.get("policy"), row.get("layers"), row.get("seq"))].append(row)
    merged = {}
    for key, group in groups.items():
        ok = [r for r in group if "error" not in r]
        if not ok:
            merged[key] = group[-1]
            continue
        row = dict(ok[-1])
        row["step_s"] = statistics.median(r["step_s"] for r in ok)
        # Other processes only ever slow a step down: the fastest step seen is the cleanest comparison.
        row["step_s_min"] = min(r.get("step_s_min", r["step_s"]) for r in ok)
        row["rss_delta_bytes"] = statistics.median(r["rss_delta_bytes"] for r in ok)
        if row.get("activation_bytes") is not None:
            row["activation_bytes"] = max(r["activation_bytes"] for r in ok)
        row["rounds"] = len(ok)
        merged[key] = row
    return merged


def fmt(value, spec=".2f", suffix=""):
    return "-" if value is None else f"{value:{spec}}{suffix}"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def sweep_table(merged):
    configs = sorted({(k[2], k[3]) for k in merged if k[0] == "tune"}, key=lambda c: (c[1] != 1024, c[0], c[1]))
    lines = ["| layers | seq | policy | ckpt blocks | activation MiB | act / off | step s (min) | step / off | "
             "measured / estimate | full: measured / (inputs + 1 block), block estimated / measured | RSS delta MiB |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    table = []
    for layers, seq in configs:
        off = merged.get(("tune", "off", layers, seq))
        policies = sorted({k[1] for k in merged if k[0] == "tune" and k[2:] == (layers, seq)},
                          key=lambda p: POLICY_ORDER.index(p) if p in POLICY_ORDER else 99)
        for policy in policies:
            row = merged[("tune", policy, layers, seq)]
            if "error" in row:
                lines.append(f"| {layers} | {seq} | {policy} | - | - | - | - | - | - | - | "
                             f"error: {row['error'][:80]} |")
                table.append({"layers": layers, "seq": seq, "policy": policy, "error": row["error"]})
                continue
            ok_off = off if off and "error" not in off else None
            act = row["activation_bytes"]
            entry = {
                "layers": layers, "seq": seq, "policy": policy,
                "checkpointed_blocks": row.get("checkpointed_blocks"),
                "activation_bytes": act,
                "activation_over_off": ratio(act, ok_off and ok_off["activation_bytes"]),
                "step_s": row["step_s_min"], "step_s_median": row["step_s"],
                "step_over_off": ratio(row["step_s_min"], ok_off and ok_off["step_s_min"]),
                "measured_over_estimate": row.get("measured_over_estimate"),
                "measured_over_full_floor": row.get("measured_over_full_floor") if policy == "full" else None,
                "measured_over_measured_floor": row.get("measured_over_measured_floor") if policy == "full" else None,
                "rss_delta_bytes": row["rss_delta_bytes"],
            }
            table.append(entry)
            lines.append(
                f"| {layers} | {seq} | {policy} | {entry['checkpointed_blocks']}/{layers} | {act / MIB:.1f} | "
                f"{fmt(entry['activation_over_off'], '.3f')} | {row['step_s_min']:.2f} | "
                f"{fmt(entry['step_over_off'], '.2f')} | {fmt(entry['measured_over_estimate'], '.3f')} | "
                f"{fmt(entry['measured_over_full_floor'], '.3f')} / {fmt(entry['measured_over_measured_floor'], '.3f')} | "
                f"{row['rss_delta_bytes'] / MIB:.0f} |")
    return lines, table


def compare_table(merged, compare):
    layers, seq = compare
    lines = ["| layers | seq | policy | tune step s (min) | PyTorch step s (min) | tune / PyTorch step | "
             "tune RSS delta MiB | PyTorch RSS delta MiB | tune / PyTorch RSS delta | tune tracked activation MiB |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    table = []
    for policy in ("off", "full"):
        tune = merged.get(("tune", policy, layers, seq))
        torch_row = merged.get(("pytorch", policy, layers, seq))
        if not tune or not torch_row or "error" in tune or "error" in torch_row:
            error = (tune or {}).get("error") or (torch_row or {}).get("error") or "missing"
            lines.append(f"| {layers} | {seq} | {policy} | - | - | - | - | - | - | {error[:60]} |")
            continue
        entry = {
            "layers": layers, "seq": seq, "policy": policy,
            "tune_step_s": tune["step_s_min"], "pytorch_step_s": torch_row["step_s_min"],
            "step_ratio": ratio(tune["step_s_min"], torch_row["step_s_min"]),
            "tune_rss_delta_bytes": tune["rss_delta_bytes"], "pytorch_rss_delta_bytes": torch_row["rss_delta_bytes"],
            "rss_ratio": ratio(tune["rss_delta_bytes"], torch_row["rss_delta_bytes"]),
            "tune_activation_bytes": tune["activation_bytes"],
        }
        table.append(entry)
        lines.append(f"| {layers} | {seq} | {policy} | {entry['tune_step_s']:.2f} | {entry['pytorch_step_s']:.2f} | "
                     f"{entry['step_ratio']:.2f} | {entry['tune_rss_delta_bytes'] / MIB:.0f} | "
                     f"{entry['pytorch_rss_delta_bytes'] / MIB:.0f} | {entry['rss_ratio']:.2f} | "
                     f"{entry['tune_activation_bytes'] / MIB:.1f} |")
    return lines, table


def loglog_slope(points):
    """Least-squares slope of log(y) against log(x)."""
    points = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    den = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / den if den else None


def targets(sweep, comparison, compare):
    """The issue's targets, judged on what was measured (reported, never asserted)."""
    layers, seq = compare
    at = {(e["policy"], e["layers"], e["seq"]): e for e in sweep if "error" not in e}
    results = []

    def add(name, value, met, detail=""):
        results.append({"target": name, "value": value, "met": met, "detail": detail})

    full = at.get(("full", layers, seq))
    if full and full["activation_over_off"]:
        cut = 1 / full["activation_over_off"]
        add(f"full cuts activation memory >= 5x ({layers} layers, seq {seq})", round(cut, 2), cut >= 5)
    floors = [e["measured_over_full_floor"] for e in sweep if e.get("policy") == "full" and "error" not in e]
    if floors:
        add("full within 1.25x of block inputs + one block (analytic one-block estimate)", round(max(floors), 3),
            max(floors) <= 1.25, "worst over the sweep")
    measured = [e["measured_over_measured_floor"] for e in sweep
                if e.get("policy") == "full" and "error" not in e and e.get("measured_over_measured_floor")]
    if measured:
        add("full within 1.25x of block inputs + one block (one block measured: a 1-layer model under full)",
            round(max(measured), 3), max(measured) <= 1.25, "worst over the sweep")
    steps = [e["step_over_off"] for e in sweep if e.get("policy") == "full" and e.get("step_over_off")]
    if steps:
        add("full costs <= 40% more step time", round(max(steps), 3), max(steps) <= 1.40,
            f"worst over the sweep; median {statistics.median(steps):.3f}")
    selective = [e["step_over_off"] for e in sweep if e.get("policy") == "selective" and e.get("step_over_off")]
    if selective:
        add("selective costs <= 15% more step time", round(max(selective), 3), max(selective) <= 1.15)
    else:
        add("selective costs <= 15% more step time", None, None, "selective not available in this build")
    for policy in ("off", "full", "sqrt"):
        points = [(e["layers"], e["activation_bytes"]) for e in sweep
                  if e.get("policy") == policy and e.get("seq") == seq and "error" not in e]
        slope = loglog_slope(points)
        if policy == "sqrt" and slope is not None:
            add("sqrt memory ~ sqrt(L) (log-log slope of activation vs layers ~ 0.5)", round(slope, 3),
                slope <= 0.65, f"layers {sorted(p[0] for p in points)} at seq {seq}")
        elif slope is not None:
            results.append({"target": f"(reference) {policy}: log-log slope of activation vs layers",
                            "value": round(slope, 3), "met": None, "detail": ""})
    for entry in comparison:
        add(f"tune <= PyTorch step time ({entry['policy']})", round(entry["step_ratio"], 3), entry["step_ratio"] <= 1.0)
        add(f"tune <= PyTorch peak RSS delta ({entry['policy']})", round(entry["rss_ratio"], 3),
            entry["rss_ratio"] <= 1.0)
    lines = ["| target | value | met |", "|---|---:|---|"]
    for r in results:
        met = "-" if r["met"] is None else ("yes" if r["met"] else "**no**")
        detail = f" ({r['detail']})" if r["detail"] else ""
        lines.append(f"| {r['target']}{detail} | {fmt(r['value'], '')} | {met} |")
    return lines, results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw")
    parser.add_argument("--out", required=True)
    parser.add_argument("--compare", default="8:1024", help="LAYERS:SEQ of the tune vs PyTorch table")
    args = parser.parse_args()
    rows = load(args.raw)
    merged = merge_repeats(rows)
    compare = tuple(int(x) for x in args.compare.split(":"))
    sweep_lines, sweep = sweep_table(merged)
    compare_lines, comparison = compare_table(merged, compare)
    target_lines, target_results = targets(sweep, comparison, compare)
    print("### Activation checkpointing: tune, per configuration and policy\n")
    print("\n".join(sweep_lines))
    compiled = any(r.get("tool") == "pytorch" and r.get("compiled") for r in rows)
    mode = "torch.compile" if compiled else "eager"
    print(f"\n### tune vs PyTorch ({mode}, torch.utils.checkpoint), bf16 autocast\n")
    print("\n".join(compare_lines))
    print("\n### Issue targets\n")
    print("\n".join(target_lines))
    with open(args.out, "w") as handle:
        json.dump({"sweep": sweep, "comparison": comparison, "targets": target_results, "raw": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
