#!/usr/bin/env python3
"""Does a text-to-video Latte trained on captioned moving shapes follow its caption, colour and direction, including
the colour x direction pairs held out of training?

    scripts/eval_t2v_captions.py TARGET --data data/t2v-shapes [--samples-per-caption 8] [--out result.json]
                                 [extra tune infer args...]

For each of the 16 captions "a {red,green,blue,yellow} square moving {right,left,down,up}" it runs
`tune infer TARGET --prompts-file F --out DIR/k.safetensors --no-grad` (the caption N times: N samples from
different noise), then measures in every sampled video the direction the shape moves (brightness-weighted centroid,
first to last frame: scripts/eval_latte_motion.py's measure; chance 25%) and its colour (the palette colour nearest
to the mean of the brightest pixels; chance 25%). DATA/heldout.json (scripts/make_t2v_shapes.py) says which pairs
were held out of training; the figures are reported for the trained and the held-out captions apart.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import eval_latte_motion  # noqa: E402
import safetensors_io  # noqa: E402

COLOURS = ["red", "green", "blue", "yellow"]  # make_moving_shapes.CLASS_COLOURS's order
DIRECTIONS = eval_latte_motion.DIRECTIONS


def measure(video):
    return eval_latte_motion.direction(video), eval_latte_motion.shape_colour_class(video)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", help="a run directory (or recipe) of recipe latte_t2v")
    parser.add_argument("--data", required=True, help="the folder scripts/make_t2v_shapes.py wrote (heldout.json)")
    parser.add_argument("--samples-per-caption", type=int, default=8)
    parser.add_argument("--tune", default=os.path.join(ROOT, "build", "apps", "tune", "tune"))
    parser.add_argument("--out", help="write the results as JSON here")
    args, extra = parser.parse_known_args()
    with open(os.path.join(args.data, "heldout.json")) as f:
        held_out = set(json.load(f)["held_out"])
    results = {"captions": {}, "samples_per_caption": args.samples_per_caption}
    totals = {"trained": [0, 0, 0, 0], "held_out": [0, 0, 0, 0]}  # direction ok, colour ok, both ok, samples
    with tempfile.TemporaryDirectory() as work:
        for colour_index, colour in enumerate(COLOURS):
            for direction_index, direction in enumerate(DIRECTIONS):
                caption = f"a {colour} square moving {direction}"
                prompts = os.path.join(work, "prompts.txt")
                with open(prompts, "w") as f:
                    f.write((caption + "\n") * args.samples_per_caption)
                out = os.path.join(work, f"{colour}-{direction}.safetensors")
                command = [args.tune, "infer", args.target, "--prompts-file", prompts, "--out", out, "--no-grad",
                           "-q"] + extra
                subprocess.run(command, check=True)
                counts = [0, 0, 0]
                for k in range(args.samples_per_caption):
                    path = out if args.samples_per_caption == 1 else out.replace(".safetensors", f"-{k}.safetensors")
                    video = safetensors_io.load(path)["video"]
                    moved, painted = measure(video)
                    counts[0] += moved == direction_index
                    counts[1] += painted == colour_index
                    counts[2] += moved == direction_index and painted == colour_index
                group = "held_out" if caption in held_out else "trained"
                for i in range(3):
                    totals[group][i] += counts[i]
                totals[group][3] += args.samples_per_caption
                results["captions"][caption] = {"held_out": group == "held_out", "direction": counts[0],
                                                "colour": counts[1], "both": counts[2]}
                print(f"{caption:32s} {'(held out)' if group == 'held_out' else '          '} direction "
                      f"{counts[0]}/{args.samples_per_caption}, colour {counts[1]}/{args.samples_per_caption}, both "
                      f"{counts[2]}/{args.samples_per_caption}", flush=True)
    for group, (moved, painted, both, n) in totals.items():
        results[group] = {"direction": moved / n, "colour": painted / n, "both": both / n, "samples": n}
        print(f"{group}: direction {100 * moved / n:.1f}%, colour {100 * painted / n:.1f}%, both {100 * both / n:.1f}% "
              f"of {n} samples (chance 25%, 25%, 6.25%)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
