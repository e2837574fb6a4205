#!/usr/bin/env python3
"""Writes a folder of random VAE latents in the format `tune prepare` writes (tune-latents-v1: latents.json plus
<class>/<video>.safetensors with 'latent' [F, C, h, w] and 'label'), for benchmarks that need Latte training at a
given latent size without videos or FFmpeg (the GPU machine has no libav). The latents are N(0, 1) noise: a
measurement of speed and memory, not of learning.

    python3 scripts/make_random_latents.py --out DIR --vae tests/fixtures/vae --image-size 64 --num-frames 16

The manifest records the VAE's channels, scaling and shift (read from its config.json) and a latent size of
image_size / 2^(len(block_out_channels) - 1), as tune checks them against the recipe (data.* and model.vae).

--text-channels D [--max-text-tokens L]: the text-to-video layout of `tune prepare` for recipe latte_t2v instead
(no classes; clips/NNNNNN.safetensors whose 'label' is the video's index, captions/NNNNNN.safetensors with
'text' [L, D] N(0, 1) and 'text_mask' [L] (the first L/4 + video tokens real), null_caption.safetensors, and the
manifest's text section), for measuring Latte-1 training without T5, videos or FFmpeg (D = the transformer's
caption_channels, 4096 for Latte-1; L = sampling.max_text_tokens, 120 by default).
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
    parser.add_argument("--text-channels", type=int, help="write the text-to-video layout (see above)")
    parser.add_argument("--max-text-tokens", type=int, default=120)
    args = parser.parse_args()
    if args.text_channels:
        return write_text_to_video(args)
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


def write_text_to_video(args):
    vae = json.load(open(os.path.join(args.vae, "config.json")))
    channels = vae.get("latent_channels", 4)
    # AutoencoderKL: 2^(stages - 1); AutoencoderDC (Sana) names its stages encoder_block_out_channels.
    stages = vae.get("encoder_block_out_channels", vae.get("block_out_channels"))
    size = args.image_size // 2 ** (len(stages) - 1)
    generator = torch.Generator().manual_seed(args.seed)
    videos = args.classes * args.videos_per_class
    tokens = args.max_text_tokens
    for folder in ("clips", "captions"):
        os.makedirs(os.path.join(args.out, folder), exist_ok=True)

    def save_caption(path, real_tokens):
        mask = (torch.arange(tokens) < real_tokens).to(torch.int64)
        text = torch.randn(tokens, args.text_channels, generator=generator) * mask.unsqueeze(1)
        safetensors_io.save(path, {"text": text, "text_mask": mask})

    save_caption(os.path.join(args.out, "null_caption.safetensors"), 1)  # the empty prompt: EOS alone
    for video in range(videos):
        save_caption(os.path.join(args.out, "captions", f"{video:06d}.safetensors"), min(tokens, tokens // 4 + video))
        latent = torch.randn(args.num_frames, channels, size, size, generator=generator)
        safetensors_io.save(os.path.join(args.out, "clips", f"{video:06d}.safetensors"),
                            {"latent": latent, "label": torch.tensor([video], dtype=torch.int64)}, {"format": "pt"})
    manifest = {"format": "tune-latents-v1", "classes": [], "videos": videos, "clips_per_video": 1,
                "num_frames": args.num_frames, "frame_interval": 1, "image_size": args.image_size, "flip": False,
                "vae": os.path.abspath(args.vae), "latent_channels": channels, "latent_size": size,
                "scaling_factor": vae.get("scaling_factor", 0.18215), "shift_factor": vae.get("shift_factor") or 0.0,
                "seed": args.seed, "complete": True,
                "text": {"captions": "(random: scripts/make_random_latents.py)", "text_encoder": "(none)",
                         "max_tokens": tokens, "channels": args.text_channels, "dtype": "fp32"}}
    with open(os.path.join(args.out, "latents.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
    print(f"make_random_latents: {videos} captioned clips of {args.num_frames}x{channels}x{size}x{size}, captions "
          f"[{tokens}, {args.text_channels}], in {args.out}")


if __name__ == "__main__":
    main()
