#!/usr/bin/env python3
"""Does a Latte model trained on moving shapes move the shape in the direction of the requested class?

    scripts/eval_latte_motion.py TARGET [--samples-per-class 8] [--out result.json] [extra tune infer args...]

For each class c (0 right, 1 left, 2 down, 3 up, as scripts/make_moving_shapes.py names them) it runs
`tune infer TARGET --class c --num-samples N --out DIR/c.safetensors --no-grad`, then finds in every sampled video
the brightness-weighted centroid of the shape in the first and last frame. The predicted direction is the dominant
axis and sign of the displacement; accuracy is the fraction of videos whose direction equals the requested class
(chance: 25%). tests/cli checks the measurement itself on generated clips, whose direction is known.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import make_moving_shapes  # noqa: E402
import safetensors_io  # noqa: E402

DIRECTIONS = ["right", "left", "down", "up"]


def centroid(frame):
    """frame [3, H, W] in [-1, 1] -> (x, y) of the bright shape (weights: brightness above the frame's median)."""
    brightness = frame.float().mean(0)
    weights = (brightness - brightness.median()).clamp(min=0) ** 2
    total = weights.sum()
    if total <= 0:
        return None
    height, width = brightness.shape
    ys = torch.arange(height, dtype=torch.float32).unsqueeze(1)
    xs = torch.arange(width, dtype=torch.float32).unsqueeze(0)
    return float((weights * xs).sum() / total), float((weights * ys).sum() / total)


def direction(video):
    """video [F, 3, H, W] -> index into DIRECTIONS, or None when no shape is found."""
    first, last = centroid(video[0]), centroid(video[-1])
    if first is None or last is None:
        return None
    dx, dy = last[0] - first[0], last[1] - first[1]
    if abs(dx) >= abs(dy):
        return 0 if dx > 0 else 1
    return 2 if dy > 0 else 3


def shape_colour_class(video):
    """For data made with make_moving_shapes.py --colours class: the class whose palette colour is nearest to the
    mean colour of the shape's pixels over the video (brightest 1/16 of each frame), or None without a shape."""
    palette = torch.tensor(make_moving_shapes.CLASS_COLOURS, dtype=torch.float32) / 127.5 - 1
    pixels = []
    for frame in video.float():
        brightness = frame.mean(0).flatten()
        count = max(1, brightness.numel() // 16)
        top = brightness.topk(count).indices
        pixels.append(frame.flatten(1)[:, top].t())
    mean = torch.cat(pixels).mean(0)
    return int(((palette - mean) ** 2).sum(1).argmin())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target")
    parser.add_argument("--samples-per-class", type=int, default=8)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--tune", default=os.path.join(ROOT, "build/apps/tune/tune"))
    parser.add_argument("--out", help="write the result as JSON here")
    parser.add_argument("--colours-by-class", action="store_true",
                        help="the training data was made with --colours class: also report whether the colour follows")
    args, extra = parser.parse_known_args()

    per_class = []
    per_class_colour = []  # only meaningful for data made with --colours class
    with tempfile.TemporaryDirectory() as work:
        for label in range(args.classes):
            out = os.path.join(work, f"class{label}.safetensors")
            command = [args.tune, "infer", args.target, "--class", str(label), "--num-samples",
                       str(args.samples_per_class), "--out", out, "--no-grad"] + extra
            completed = subprocess.run(command, capture_output=True, text=True)
            if completed.returncode != 0:
                sys.stderr.write(completed.stderr)
                sys.exit(completed.returncode)
            correct = 0
            colour_correct = 0
            for index in range(args.samples_per_class):
                name = out if args.samples_per_class == 1 else os.path.join(work, f"class{label}-{index}.safetensors")
                video = safetensors_io.load(name)["video"]
                correct += direction(video) == label
                colour_correct += shape_colour_class(video) == label
            per_class.append(correct)
            per_class_colour.append(colour_correct)
    total = args.classes * args.samples_per_class
    accuracy = sum(per_class) / total
    print(f"motion direction matches the requested class in {accuracy:.1%} of {total} sampled videos "
          f"(per class {', '.join(f'{DIRECTIONS[c]} {n}/{args.samples_per_class}' for c, n in enumerate(per_class))}; "
          f"chance 25%)")
    colour_accuracy = sum(per_class_colour) / total
    if args.colours_by_class:
        print(f"shape colour matches the requested class's colour in {colour_accuracy:.1%} (data made with "
              f"--colours class)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"target": args.target, "accuracy": accuracy, "per_class_correct": per_class,
                       "samples_per_class": args.samples_per_class,
                       "colour_accuracy": colour_accuracy if args.colours_by_class else None}, f, indent=2)


if __name__ == "__main__":
    main()
