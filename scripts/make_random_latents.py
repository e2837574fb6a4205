#!/usr/bin/env python3
"""Writes a folder of random VAE latents in the format `tune prepare` writes (tune-latents-v1: latents.json plus
<class>/<video>.safetensors with 'latent' [F, C, h, w] and 'label'), for benchmarks that need Latte training at a
given latent size without videos or FFmpeg (the GPU machine has no libav). The latents are N(0, 1) noise: a
measurement of speed and memory, not of learning.

    python3 scripts/make_random_latents.py --out DIR --vae tests/fixtures/vae --image-size 64 --num-frames 16

The manifest records the VAE's channels, scaling and shift (read from its config.json) and a latent size of
image_size / 2^(len(block_out_channels) - 1), as tune checks them against the recipe (data.* and model.vae).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--vae", required=True, help="diffusers AutoencoderKL folder the recipe names as model.vae")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--num-frames", type=int, default=16)
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--videos-per-class", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    vae = json.load(open(os.path.join(args.vae, "config.json")))
    channels = vae.get("latent_channels", 4)
    size = args.image_size // 2 ** (len(vae["block_out_channels"]) - 1)
    generator = torch.Generator().manual_seed(args.seed)
    classes = [f"{i}_class" for i in range(args.classes)]
    for label, name in enumerate(classes):
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
        for video in range(args.videos_per_class):
            latent = torch.randn(args.num_frames, channels, size, size, generator=generator)
            safetensors_io.save(os.path.join(args.out, name, f"v{video:04d}.safetensors"),
                                {"latent": latent, "label": torch.tensor([label], dtype=torch.int64)},
                                {"format": "pt"})
    manifest = {"format": "tune-latents-v1", "classes": classes, "videos": args.classes * args.videos_per_class,
                "clips_per_video": 1, "num_frames": args.num_frames, "frame_interval": 1,
                "image_size": args.image_size, "flip": False, "vae": os.path.abspath(args.vae),
                "latent_channels": channels, "latent_size": size,
                "scaling_factor": vae.get("scaling_factor", 0.18215), "shift_factor": vae.get("shift_factor") or 0.0,
                "seed": args.seed, "complete": True}
    with open(os.path.join(args.out, "latents.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    print(f"make_random_latents: {manifest['videos']} clips of {args.num_frames}x{channels}x{size}x{size} in {args.out}")


if __name__ == "__main__":
    main()
