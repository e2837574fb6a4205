#!/usr/bin/env python3
"""Convert an official Latte checkpoint (Vchitect/Latte, a .pt written by train.py) to tune's layout:
<out>/model.safetensors (the official tensor names, unchanged) and <out>/latte_config.json (tune's Latte config, see
src/tune/models/latte_config.h). The config is not named config.json: that name marks a Hugging Face LLM directory
for tune, and `model.path` of a Latte recipe reads latte_config.json.

The .pt holds the state dict directly or under "ema" (preferred: the weights sampling uses) or "model"; a
"module." prefix (DDP) is removed. The architecture comes from the variant name plus options, as the official
sample configs give them, and is checked against the tensors' shapes before anything is written.

  .venv/bin/python scripts/convert_latte_checkpoint.py ucf101.pt out/ --variant Latte-XL/2 \
      --num-frames 16 --image-size 256 --num-classes 101 --extras 2

--image-size is the video size in pixels (latent size = image-size / 8, as the official scripts use the SD VAE);
--input-size gives the latent size directly. --hidden-size, --depth, --num-heads and --patch-size override the
variant's numbers (a custom size, as a recipe's model.* keys do). Text-to-video checkpoints (extras 78) are rejected.

Sample from the result with a Latte recipe whose model.path is <out> (tune infer RECIPE.yaml --class N).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

SIZES = {"S": (12, 384, 6), "B": (12, 768, 12), "L": (24, 1024, 16), "XL": (28, 1152, 16)}


def preset(variant):
    try:
        size, patch = variant.split("-", 1)[1].split("/")
        depth, hidden, heads = SIZES[size]
        patch = int(patch)
        if variant.split("-", 1)[0] != "Latte" or patch not in (2, 4, 8):
            raise ValueError
    except (IndexError, KeyError, ValueError):
        names = [f"Latte-{s}/{p}" for s in SIZES for p in (2, 4, 8)]
        sys.exit(f"error: unknown variant '{variant}'; choose among {', '.join(names)}")
    return dict(depth=depth, hidden_size=hidden, num_heads=heads, patch_size=patch)


def pick_state_dict(checkpoint, key):
    if key is not None:
        if key not in checkpoint:
            sys.exit(f"error: the checkpoint has no '{key}' entry; it has {sorted(checkpoint.keys())}")
        state = checkpoint[key]
    elif isinstance(checkpoint, dict) and "ema" in checkpoint:
        state = checkpoint["ema"]
    elif isinstance(checkpoint, dict) and "model" in checkpoint:
        state = checkpoint["model"]
    else:
        state = checkpoint
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


def remove_stale_config(out_dir):
    """An earlier conversion into the same directory wrote config.json, which would make tune take the directory
    for an LLM: remove it when it is a Latte config (anything else is left alone)."""
    path = os.path.join(out_dir, "config.json")
    try:
        with open(path) as f:
            stale = json.load(f).get("model_type") == "latte"
    except (OSError, ValueError, AttributeError):
        return
    if stale:
        os.remove(path)
        print(f"removed {path} (an older conversion's config; latte_config.json replaces it)")


def expected_shapes(cfg):
    D, C, p = cfg["hidden_size"], cfg["in_channels"], cfg["patch_size"]
    out_ch = 2 * C if cfg["learn_sigma"] else C
    inner = int(D * cfg["mlp_ratio"])
    grid = cfg["input_size"] // p
    shapes = {
        "pos_embed": [1, grid * grid, D], "temp_embed": [1, cfg["num_frames"], D],
        "x_embedder.proj.weight": [D, C, p, p], "x_embedder.proj.bias": [D],
        "t_embedder.mlp.0.weight": [D, 256], "t_embedder.mlp.0.bias": [D],
        "t_embedder.mlp.2.weight": [D, D], "t_embedder.mlp.2.bias": [D],
        "final_layer.linear.weight": [p * p * out_ch, D], "final_layer.linear.bias": [p * p * out_ch],
        "final_layer.adaLN_modulation.1.weight": [2 * D, D], "final_layer.adaLN_modulation.1.bias": [2 * D],
    }
    if cfg["extras"] == 2:
        shapes["y_embedder.embedding_table.weight"] = [cfg["num_classes"] + (cfg["class_dropout_prob"] > 0), D]
    for n in range(cfg["depth"]):
        b = f"blocks.{n}."
        shapes.update({
            b + "attn.qkv.weight": [3 * D, D], b + "attn.qkv.bias": [3 * D],
            b + "attn.proj.weight": [D, D], b + "attn.proj.bias": [D],
            b + "mlp.fc1.weight": [inner, D], b + "mlp.fc1.bias": [inner],
            b + "mlp.fc2.weight": [D, inner], b + "mlp.fc2.bias": [D],
            b + "adaLN_modulation.1.weight": [6 * D, D], b + "adaLN_modulation.1.bias": [6 * D],
        })
    return shapes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="official .pt file")
    parser.add_argument("out_dir", help="directory for model.safetensors and latte_config.json")
    parser.add_argument("--variant", required=True, help="Latte-S/2 ... Latte-XL/8")
    for name in ("hidden-size", "depth", "num-heads", "patch-size"):
        parser.add_argument(f"--{name}", type=int, help=f"override the variant's {name.replace('-', ' ')}")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--image-size", type=int, help="video size in pixels (latent = image-size / 8)")
    size.add_argument("--input-size", type=int, help="latent size (default 32)")
    parser.add_argument("--num-frames", type=int, default=16)
    parser.add_argument("--in-channels", type=int, default=4)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--class-dropout-prob", type=float, default=0.1)
    parser.add_argument("--extras", type=int, default=1, help="1 unconditional, 2 class-conditional")
    parser.add_argument("--no-learn-sigma", action="store_true")
    parser.add_argument("--state-key", help="take the state dict from this entry instead of ema/model")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    args = parser.parse_args()

    if args.extras == 78:
        sys.exit("error: --extras 78 (text-to-video) is not supported by tune; use 1 (unconditional) or 2 (class)")
    if args.extras not in (1, 2):
        sys.exit(f"error: --extras must be 1 or 2, got {args.extras}")
    input_size = args.input_size if args.input_size else (args.image_size // 8 if args.image_size else 32)
    if args.image_size and args.image_size % 8:
        sys.exit(f"error: --image-size {args.image_size} is not divisible by 8 (the VAE's downsampling)")
    cfg = dict(model_type="latte", variant=args.variant, input_size=input_size, in_channels=args.in_channels,
               mlp_ratio=4.0, num_frames=args.num_frames, class_dropout_prob=args.class_dropout_prob,
               num_classes=args.num_classes, learn_sigma=not args.no_learn_sigma, extras=args.extras)
    cfg.update(preset(args.variant))
    overrides = {key: getattr(args, key) for key in ("hidden_size", "depth", "num_heads", "patch_size")
                 if getattr(args, key) is not None}
    if overrides:
        cfg.update(overrides)
        del cfg["variant"]  # the numbers are no longer the preset's; the name would mislead

    # Checkpoints written by DiT-style train.py scripts also hold their argparse Namespace under "args": allow that
    # one class, keeping torch.load's safe (weights_only) unpickler for everything else.
    torch.serialization.add_safe_globals([argparse.Namespace])
    checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    state = pick_state_dict(checkpoint, args.state_key)
    if any(k.startswith("text_embedding_projection") for k in state):
        sys.exit("error: this is a text-to-video checkpoint (extras 78), which tune does not support")

    expected = expected_shapes(cfg)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [f"{k}: checkpoint {list(state[k].shape)}, config {expected[k]}" for k in expected
             if k in state and list(state[k].shape) != expected[k]]
    if missing or unexpected or wrong:
        lines = [f"error: the checkpoint does not match {args.variant} with these options:"]
        lines += [f"  missing: {k}" for k in missing[:20]]
        lines += [f"  unexpected: {k}" for k in unexpected[:20]]
        lines += [f"  shape: {w}" for w in wrong[:20]]
        lines.append("---> HINT: check --variant (or --hidden-size, --depth, --num-heads, --patch-size), --num-frames, "
                     "--image-size/--input-size, --num-classes, --extras and --no-learn-sigma against the config the "
                     "model was trained with")
        sys.exit("\n".join(lines))

    dtype = getattr(torch, args.dtype)
    tensors = {k: state[k].detach().to(dtype).contiguous() for k in expected}
    os.makedirs(args.out_dir, exist_ok=True)
    safetensors_io.save(os.path.join(args.out_dir, "model.safetensors"), tensors, metadata={"format": "pt"})
    with open(os.path.join(args.out_dir, "latte_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    remove_stale_config(args.out_dir)
    print(f"wrote {len(tensors)} tensors and latte_config.json to {args.out_dir}")


if __name__ == "__main__":
    main()
