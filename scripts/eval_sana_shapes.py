#!/usr/bin/env python3
"""Does an image follow its prompt? Samples the Sana default (recipes/sana-tiny.yaml) for every colour x shape x
position caption of scripts/make_sana_shapes.py, the held-out combinations included, and reads each image's colour,
shape and position back with a fixed classifier.

    .venv/bin/python scripts/eval_sana_shapes.py --run runs/sana-tiny --data data/sana-shapes [--seeds 4]
        [--tune build/apps/tune/tune] [--out FILE.json]

Sampling: `tune infer RUN --prompts-file ALL --seed S --no-grad` (the run's newest EMA transformer, the recipe's
sampling settings: 20 DPM-Solver++ steps, guidance 4.5), once per seed. The classifier (checked on the training images
first, where it must be right): the foreground is the pixels whose brightest channel is above 90 (of 255; the
background is black); colour = the palette colour nearest the foreground's mean; position = the quadrant of its
centroid; shape = its area over its bounding box's (a square fills ~1, a circle ~0.79, a triangle ~0.5: cut at 0.88
and 0.65). An image with fewer than 12 foreground pixels shows no shape and counts as wrong on every attribute.
Reports, for the training combinations and the held-out ones: the share of images right on colour, shape, position
and on all three.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def classify(path, palette):
    pixels = np.asarray(Image.open(path).convert("RGB")).astype(np.float64)
    mask = pixels.max(axis=2) > 90
    if mask.sum() < 12:
        return None
    ys, xs = np.nonzero(mask)
    mean = pixels[mask].mean(axis=0)
    colour = min(palette, key=lambda name: float(((np.array(palette[name]) - mean) ** 2).sum()))
    height, width = mask.shape
    position = f"{'top' if ys.mean() < height / 2 else 'bottom'} {'left' if xs.mean() < width / 2 else 'right'}"
    fill = mask.sum() / ((ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1))
    shape = "square" if fill >= 0.88 else "circle" if fill >= 0.65 else "triangle"
    return {"colour": colour, "shape": shape, "position": position}


def expected(caption, meta):
    # "a red circle at the top left"
    words = caption.split()
    return {"colour": words[1], "shape": words[2], "position": " ".join(words[5:])}


def score(results):
    keys = ("colour", "shape", "position")
    total = len(results)
    out = {k: sum(r["seen"] is not None and r["seen"][k] == r["want"][k] for r in results) / total for k in keys}
    out["all"] = sum(r["seen"] is not None and all(r["seen"][k] == r["want"][k] for k in keys) for r in results) / total
    out["images"] = total
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--out")
    args = parser.parse_args()
    meta = json.load(open(os.path.join(args.data, "heldout.json")))
    palette = meta["colours"]
    # The classifier on the training images themselves.
    rows = [json.loads(line) for line in open(os.path.join(args.data, "captions.jsonl"))][::7]
    truth = [{"want": expected(r["caption"], meta), "seen": classify(os.path.join(args.data, r["image"]), palette)}
             for r in rows]
    check = score(truth)
    print(f"classifier on {check['images']} training images: colour {check['colour']:.3f}, shape {check['shape']:.3f}, "
          f"position {check['position']:.3f}, all {check['all']:.3f}")
    captions = meta["all"]
    held_out = set(meta["held_out"])
    results = {"train": [], "held_out": []}
    with tempfile.TemporaryDirectory(prefix="eval-sana-") as work:
        prompts = os.path.join(work, "prompts.txt")
        with open(prompts, "w") as f:
            f.write("\n".join(captions) + "\n")
        for seed in range(args.seeds):
            out = os.path.join(work, f"seed{seed}.png")
            completed = subprocess.run([args.tune, "infer", args.run, "--prompts-file", prompts, "--seed", str(seed),
                                        "--no-grad", "--out", out], capture_output=True, text=True)
            if completed.returncode != 0:
                sys.exit(f"tune infer failed:\n{completed.stderr[-3000:]}")
            for index, text in enumerate(captions):
                path = os.path.join(work, f"seed{seed}-{index}.png")
                results["held_out" if text in held_out else "train"].append(
                    {"caption": text, "seed": seed, "want": expected(text, meta), "seen": classify(path, palette)})
    report = {"classifier_on_training_images": check, "train": score(results["train"]),
              "held_out": score(results["held_out"]), "seeds": args.seeds}
    for split in ("train", "held_out"):
        s = report[split]
        print(f"{split:9s} ({s['images']} images): colour {s['colour']:.3f}, shape {s['shape']:.3f}, position "
              f"{s['position']:.3f}, all three {s['all']:.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(report, images=results), f, indent=1)


if __name__ == "__main__":
    main()
