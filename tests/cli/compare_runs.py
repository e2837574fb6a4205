"""Compares two tune runs: losses per logged step (metrics.jsonl) and every tensor of the final checkpoint's weight
files, as the largest relative difference |a - b| / max|b|. Prints the figures; exits 1 when one exceeds --tol.

    compare_runs.py RUN_A RUN_B --step N [--tol 1e-6] [--weight-tol T] [--files model.safetensors ema.safetensors]
                    [--tensor-tol NAME=T ...]

--tensor-tol gives one tensor its own bound (e.g. an embedding whose rarely used rows get near-zero gradients, which
AdamW's g / sqrt(v) turns summation-order differences into larger steps for); it is reported on its own line.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import safetensors_io  # noqa: E402


def losses(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return {r["step"]: r["loss"] for r in map(json.loads, filter(str.strip, f))}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    parser.add_argument("--step", type=int, required=True, help="the checkpoint step-N to compare")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--weight-tol", type=float, default=None, help="for the weights (default: --tol)")
    parser.add_argument("--files", nargs="+", default=["model.safetensors"])
    parser.add_argument("--tensor-tol", nargs="*", default=[], help="NAME=TOL: a bound of its own for one tensor")
    args = parser.parse_args()
    own_bounds = {name: float(tol) for name, tol in (item.split("=", 1) for item in args.tensor_tol)}
    own_diffs = {}

    a, b = losses(args.run_a), losses(args.run_b)
    if sorted(a) != sorted(b):
        print(f"logged steps differ: {sorted(a)} vs {sorted(b)}")
        return 1
    loss_diff = max(abs(a[s] - b[s]) / max(abs(b[s]), 1e-30) for s in a)
    weight_diff, tensors = 0.0, 0
    for name in args.files:
        ta = safetensors_io.load(os.path.join(args.run_a, "checkpoints", f"step-{args.step}", name))
        tb = safetensors_io.load(os.path.join(args.run_b, "checkpoints", f"step-{args.step}", name))
        if sorted(ta) != sorted(tb):
            print(f"{name}: tensor names differ")
            return 1
        for key in ta:
            x, y = ta[key].double(), tb[key].double()
            scale = max(float(y.abs().max()), 1e-30) if y.numel() else 1.0
            diff = float((x - y).abs().max()) / scale if y.numel() else 0.0
            if key in own_bounds:
                own_diffs[key] = diff
            else:
                weight_diff = max(weight_diff, diff)
            tensors += 1
    weight_tol = args.tol if args.weight_tol is None else args.weight_tol
    print(f"{len(a)} losses: max relative difference {loss_diff:.3g} (tolerance {args.tol:g}); {tensors} tensors: max "
          f"relative difference {weight_diff:.3g} (tolerance {weight_tol:g})")
    own_ok = True
    for key, bound in own_bounds.items():
        if key not in own_diffs:
            print(f"{key}: not in the compared files")
            own_ok = False
            continue
        print(f"  {key}: relative difference {own_diffs[key]:.3g} (its own tolerance {bound:g})")
        own_ok = own_ok and own_diffs[key] <= bound
    return 0 if loss_diff <= args.tol and weight_diff <= weight_tol and own_ok else 1


if __name__ == "__main__":
    sys.exit(main())
