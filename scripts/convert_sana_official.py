#!/usr/bin/env python3
"""Convert an official NVlabs Sana checkpoint (SanaMS / Sana 1.5; a .pth written by the official train.py, state
dict under "state_dict") to a diffusers SanaTransformer2DModel folder, which tune loads as a pipeline's
transformer (model.transformer: OUT) and diffusers loads with SanaTransformer2DModel.from_pretrained(OUT):
  OUT/config.json, OUT/diffusion_pytorch_model.safetensors

  .venv/bin/python scripts/convert_sana_official.py Sana_1600M_1024px.pth OUT --image-size 1024

The renaming is diffusers' (scripts/convert_sana_to_diffusers.py): the fused self-attention attn.qkv splits into
to_q / to_k / to_v, the cross-attention's kv_linear into to_k / to_v, mlp.{inverted,depth,point}_conv.conv into
ff.conv_{inverted,depth,point}, t_embedder / t_block / y_embedder.y_proj / attention_y_norm / final_layer into
time_embed / caption_projection / caption_norm / proj_out and scale_shift_table. The architecture is read from the
tensors (width, layers, qk-norm when attn.q_norm exists); the cross-attention's head count is not in the tensors
and comes from the official model sizes (width 1152: 16 heads, 2240: 20) unless --cross-heads gives it. The
linear self-attention's heads are 32 channels wide in every released model (--linear-head-dim otherwise). --image-size sets sample_size
(image / 32) and, as the converter, a sin-cos table only for 2048 (interpolation scale 1.0) and 4096 (2.0).

Dropped, as diffusers drops them: y_embedder.y_embedding (the learned null caption; tune trains caption dropout
to the empty prompt's embedding instead), pos_embed (recomputed), logvar_linear.* (unused by sampling).
"""
import argparse
import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

CROSS_HEADS = {1152: 16, 2240: 20}
LINEAR_HEAD_DIM = 32
INTERPOLATION_SCALE = {512: None, 1024: None, 2048: 1.0, 4096: 2.0}
DROPPED = ("y_embedder.y_embedding", "pos_embed", "logvar_linear.weight", "logvar_linear.bias")


def load_state_dict(path):
    if path.endswith(".safetensors"):
        return safetensors_io.load(path)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        sys.exit(f"error: {path}: expected a state dict (or one under 'state_dict')")
    return {k.removeprefix("module."): v for k, v in state.items()}


def convert(state, cross_heads_override, linear_head_dim, image_size):
    state = dict(state)
    out = {}

    def move(new, old):
        if old not in state:
            sys.exit(f"error: the checkpoint has no '{old}' (needed for {new}); is it an official SanaMS checkpoint?")
        out[new] = state.pop(old)

    move("patch_embed.proj.weight", "x_embedder.proj.weight")
    move("patch_embed.proj.bias", "x_embedder.proj.bias")
    for i in (1, 2):
        move(f"caption_projection.linear_{i}.weight", f"y_embedder.y_proj.fc{i}.weight")
        move(f"caption_projection.linear_{i}.bias", f"y_embedder.y_proj.fc{i}.bias")
    for new, old in (("linear_1", "mlp.0"), ("linear_2", "mlp.2")):
        for kind in ("weight", "bias"):
            move(f"time_embed.emb.timestep_embedder.{new}.{kind}", f"t_embedder.{old}.{kind}")
    move("time_embed.linear.weight", "t_block.1.weight")
    move("time_embed.linear.bias", "t_block.1.bias")
    move("caption_norm.weight", "attention_y_norm.weight")

    layers = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k)))
    qk_norm = "blocks.0.attn.q_norm.weight" in state
    for i in range(layers):
        src, dst = f"blocks.{i}", f"transformer_blocks.{i}"
        move(f"{dst}.scale_shift_table", f"{src}.scale_shift_table")
        q, k, v = torch.chunk(state.pop(f"{src}.attn.qkv.weight"), 3, dim=0)
        out[f"{dst}.attn1.to_q.weight"], out[f"{dst}.attn1.to_k.weight"], out[f"{dst}.attn1.to_v.weight"] = q, k, v
        move(f"{dst}.attn1.to_out.0.weight", f"{src}.attn.proj.weight")
        move(f"{dst}.attn1.to_out.0.bias", f"{src}.attn.proj.bias")
        for new, old in (("conv_inverted", "inverted_conv"), ("conv_depth", "depth_conv"), ("conv_point", "point_conv")):
            move(f"{dst}.ff.{new}.weight", f"{src}.mlp.{old}.conv.weight")
            if f"{src}.mlp.{old}.conv.bias" in state:
                move(f"{dst}.ff.{new}.bias", f"{src}.mlp.{old}.conv.bias")
        move(f"{dst}.attn2.to_q.weight", f"{src}.cross_attn.q_linear.weight")
        move(f"{dst}.attn2.to_q.bias", f"{src}.cross_attn.q_linear.bias")
        k, v = torch.chunk(state.pop(f"{src}.cross_attn.kv_linear.weight"), 2, dim=0)
        k_bias, v_bias = torch.chunk(state.pop(f"{src}.cross_attn.kv_linear.bias"), 2, dim=0)
        out[f"{dst}.attn2.to_k.weight"], out[f"{dst}.attn2.to_v.weight"] = k, v
        out[f"{dst}.attn2.to_k.bias"], out[f"{dst}.attn2.to_v.bias"] = k_bias, v_bias
        move(f"{dst}.attn2.to_out.0.weight", f"{src}.cross_attn.proj.weight")
        move(f"{dst}.attn2.to_out.0.bias", f"{src}.cross_attn.proj.bias")
        if qk_norm:
            for attn, old in (("attn1", "attn"), ("attn2", "cross_attn")):
                move(f"{dst}.{attn}.norm_q.weight", f"{src}.{old}.q_norm.weight")
                move(f"{dst}.{attn}.norm_k.weight", f"{src}.{old}.k_norm.weight")
    move("proj_out.weight", "final_layer.linear.weight")
    move("proj_out.bias", "final_layer.linear.bias")
    move("scale_shift_table", "final_layer.scale_shift_table")
    for name in DROPPED:
        state.pop(name, None)
    if state:
        sys.exit(f"error: tensors this converter does not know: {sorted(state)[:10]}")

    width, in_channels, patch = out["patch_embed.proj.weight"].shape[:3]
    cross_inner = out["transformer_blocks.0.attn2.to_q.weight"].shape[0]
    cross_heads = cross_heads_override or CROSS_HEADS.get(width)
    if cross_heads is None or cross_inner % cross_heads:
        sys.exit(f"error: width {width} is not a released Sana size; give --cross-heads (dividing {cross_inner})")
    if width % linear_head_dim:
        sys.exit(f"error: --linear-head-dim {linear_head_dim} does not divide the width {width}")
    config = {
        "_class_name": "SanaTransformer2DModel",
        "in_channels": in_channels,
        "out_channels": out["proj_out.weight"].shape[0] // (patch * patch),
        "num_attention_heads": width // linear_head_dim,
        "attention_head_dim": linear_head_dim,
        "num_layers": layers,
        "num_cross_attention_heads": cross_heads,
        "cross_attention_head_dim": cross_inner // cross_heads,
        "cross_attention_dim": width,
        "caption_channels": out["caption_projection.linear_1.weight"].shape[1],
        "mlp_ratio": out["transformer_blocks.0.ff.conv_point.weight"].shape[1] / width,
        "attention_bias": "transformer_blocks.0.attn1.to_q.bias" in out,
        "sample_size": image_size // 32,
        "patch_size": patch,
        "norm_elementwise_affine": False,
        "norm_eps": 1e-6,
        "interpolation_scale": INTERPOLATION_SCALE[image_size],
        "qk_norm": "rms_norm_across_heads" if qk_norm else None,
    }
    return out, config


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="the official .pth (or a .safetensors of the same names)")
    parser.add_argument("out", help="the diffusers transformer folder to write")
    parser.add_argument("--image-size", type=int, default=1024, choices=sorted(INTERPOLATION_SCALE))
    parser.add_argument("--cross-heads", type=int, help="cross-attention heads (default: from the width)")
    parser.add_argument("--linear-head-dim", type=int, default=LINEAR_HEAD_DIM,
                        help="channels per linear self-attention head (32 in every released model)")
    args = parser.parse_args()
    tensors, config = convert(load_state_dict(args.checkpoint), args.cross_heads, args.linear_head_dim,
                               args.image_size)
    os.makedirs(args.out, exist_ok=True)
    safetensors_io.save(os.path.join(args.out, "diffusion_pytorch_model.safetensors"),
                        {k: v.contiguous() for k, v in tensors.items()})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"wrote {args.out}: {len(tensors)} tensors, {config['num_layers']} layers, width "
          f"{config['cross_attention_dim']}, qk_norm {config['qk_norm']}")


if __name__ == "__main__":
    main()
