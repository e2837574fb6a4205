#!/usr/bin/env python3
"""Reference outputs for tune's LatteT2V (src/tune/models/latte_t2v.h) from Hugging Face diffusers'
LatteTransformer3DModel, the text-to-video Latte that Latte-1 ships as (read by tests/models/test_latte_t2v.cpp).

    .venv/bin/python scripts/make_diffusers_latte_t2v_fixture.py --out DIR     (deterministic; run by CTest)

A tiny seeded model with Latte-1's config apart from the sizes (sample_size 8, patch 2, 2 spatial + 2 temporal
blocks, 3 heads of 8 (inner 24), caption_channels 32, in 4 / out 8 channels, video_length 4), every parameter
randomised, saved with save_pretrained as a diffusers transformer folder that tune loads by diffusers' names:
  DIR/transformer/config.json, DIR/transformer/diffusion_pytorch_model.safetensors   (float32 weights)
and its outputs, run in float64 (model.double()), in DIR/io.safetensors, per case CASE:
  CASE.x       [B, F, 4, H, W] f64, tune's layout [B, F, C, H, W] (diffusers' is [B, C, F, H, W]; the script
               permutes before calling diffusers and back after)
  CASE.t       [B] int64 timesteps (the pipeline's type)
  CASE.text    [B, L, 32] f64 caption embeddings (L = 7)
  CASE.mask    [B, L] int64, 1 = attend (absent when the case has no mask)
  CASE.output  [B, F, 8, H, W] f64: diffusers with every fixed table in float64 (below)
  CASE.output_stock  the same from diffusers exactly as shipped
  CASE.temporal      [] int64: 1 when temporal attention is on
Cases: main (B 2, F 4, 8x8, timesteps 11 and 742, the second caption padded after 4 tokens), no_mask, spatial_only
(temporal attention off), single_frame (F 1, temporal on: no temporal table), single_frame_spatial_only,
three_frames (F 3: a second diffusers model built with video_length 3 from the same weights, since diffusers'
temporal table has exactly video_length rows) and non_square (16x12 latents: diffusers recomputes the 2-D table
for the 8x6 patch grid with its base_size / interpolation_scale rule).

Two things the diffusers code does in float32 whatever the model's dtype, and which "output" replaces by float64:
the timestep sinusoid (get_timestep_embedding: t * frequency rounds by up to ~6e-5 at t = 742) and the stored
sin-cos tables (PatchEmbed's pos_embed and temp_pos_embed are cast with .float(), also when recomputed for
another size). For "output" the script patches get_timestep_embedding with the same formula in float64 and sets the
tables to diffusers' own functions' float64 results, with PatchEmbed's grid set to the case's size, so the
comparison can be tight (tune computes both in float64). The 2-D grid positions stay diffusers' float32 ones, as
tune computes them. "output_stock" is diffusers untouched, for a float32 comparison.

The text mask: LatteTransformer3DModel passes encoder_attention_mask to its blocks as given, and a 2-D [B, L] mask
fails there for F > 1 (diffusers 0.42.1: the processor views a [B*heads, L] mask as [B*F, heads, -1, L]); its
pipeline never passes one. The script passes what the official Latte code builds from a mask, the additive bias
(1 - mask) * -10000 repeated per frame, [B*F, 1, L], which is what tune computes from the [B, L] mask.

If torch or diffusers is not installed, writes DIR/SKIPPED with the reason instead and exits 0; the test then exits 77
(reported skipped by CTest, never passed).
"""
import math
import os
import sys

try:
    import torch
except ImportError:  # reported as SKIPPED by main(), like a missing diffusers
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_output  # noqa: E402

CONFIG = dict(sample_size=8, num_layers=2, patch_size=2, attention_head_dim=8, num_attention_heads=3,
              caption_channels=32, in_channels=4, cross_attention_dim=24, out_channels=8, attention_bias=True,
              activation_fn="gelu-approximate", num_embeds_ada_norm=1000, norm_type="ada_norm_single",
              norm_elementwise_affine=False, norm_eps=1e-6, dropout=0.0, video_length=4)
TEXT_LENGTH = 7


def build_model(video_length, state_dict=None):
    from diffusers import LatteTransformer3DModel
    model = LatteTransformer3DModel(**dict(CONFIG, video_length=video_length))
    if state_dict is not None:
        model.load_state_dict(state_dict)  # the temporal table is a non-persistent buffer: rebuilt for video_length
    return model.eval()


def randomise(model):
    """diffusers leaves nn.Linear's small uniform init; give every tensor a random value of a size that matters."""
    generator = torch.Generator().manual_seed(20250123)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p[0].numel() if p.dim() > 1 else p.shape[-1]
            std = 0.2 if name.endswith("bias") else 1.0 / math.sqrt(fan_in)
            p.copy_(torch.randn(p.shape, generator=generator) * std)


def float64_timestep_embedding(timesteps, embedding_dim, flip_sin_to_cos=False, downscale_freq_shift=1, scale=1,
                               max_period=10000):
    """diffusers' get_timestep_embedding formula evaluated in float64 (it computes in float32)."""
    half = embedding_dim // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float64) / (half - downscale_freq_shift)
    angles = scale * timesteps[:, None].to(torch.float64) * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
    if flip_sin_to_cos:
        emb = torch.cat([emb[:, half:], emb[:, :half]], dim=-1)
    if embedding_dim % 2 == 1:
        emb = torch.nn.functional.pad(emb, (0, 1, 0, 0))
    return emb


def set_float64_tables(model, frames, grid_height, grid_width):
    """The tables diffusers would use for this input, from its own functions, kept in float64."""
    from diffusers.models.embeddings import get_1d_sincos_pos_embed_from_grid, get_2d_sincos_pos_embed
    embed = model.pos_embed
    dim = embed.pos_embed.shape[-1]
    embed.height, embed.width = grid_height, grid_width  # so forward uses the buffer instead of recomputing
    embed.pos_embed = get_2d_sincos_pos_embed(dim, (grid_height, grid_width), base_size=embed.base_size,
                                              interpolation_scale=embed.interpolation_scale,
                                              output_type="pt").to(torch.float64).unsqueeze(0)
    model.temp_pos_embed = get_1d_sincos_pos_embed_from_grid(
        dim, torch.arange(0, frames).unsqueeze(1), output_type="pt").to(torch.float64).unsqueeze(0)


def run(model, x, t, text, mask, temporal):
    frames = x.shape[1]
    bias = None
    if mask is not None:
        bias = ((1 - mask.to(torch.float64)) * -10000.0)[:, None, :].repeat_interleave(frames, 0)
    with torch.no_grad():
        out = model(x.permute(0, 2, 1, 3, 4), timestep=t, encoder_hidden_states=text, encoder_attention_mask=bias,
                    enable_temporal_attentions=temporal, return_dict=False)[0]
    return out.permute(0, 2, 1, 3, 4).contiguous()  # [B, C, F, H, W] -> [B, F, C, H, W]


def main():
    out = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    if fixture_output.skipped_without(out, "make_diffusers_latte_t2v_fixture", "torch", "diffusers"):
        return
    import diffusers
    import diffusers.models.embeddings as embeddings
    import safetensors_io

    torch.manual_seed(0)
    model = build_model(CONFIG["video_length"])
    randomise(model)
    model.save_pretrained(os.path.join(out, "transformer"), safe_serialization=True)
    weights = {k: v.clone() for k, v in model.state_dict().items()}

    generator = torch.Generator().manual_seed(7)
    B, C, L, P = 2, CONFIG["in_channels"], TEXT_LENGTH, CONFIG["patch_size"]
    text = torch.randn(B, L, CONFIG["caption_channels"], generator=generator, dtype=torch.float64)
    t = torch.tensor([11, 742], dtype=torch.int64)
    mask = torch.ones(B, L, dtype=torch.int64)
    mask[1, 4:] = 0

    def video(frames, height, width):
        return torch.randn(B, frames, C, height, width, generator=generator, dtype=torch.float64)

    x4 = video(4, 8, 8)
    x1 = x4[:, :1].contiguous()
    cases = {  # name: (x, mask, temporal)
        "main": (x4, mask, True),
        "no_mask": (x4, None, True),
        "spatial_only": (x4, mask, False),
        "single_frame": (x1, mask, True),
        "single_frame_spatial_only": (x1, mask, False),
        "three_frames": (video(3, 8, 8), mask, True),
        "non_square": (video(4, 16, 12), mask, True),
    }
    stock_timestep_embedding = embeddings.get_timestep_embedding
    records = {}
    for name, (x, case_mask, temporal) in cases.items():
        frames, height, width = x.shape[1], x.shape[3], x.shape[4]
        stock = build_model(frames if frames > 1 else CONFIG["video_length"], weights).double()
        output_stock = run(stock, x, t, text, case_mask, temporal)
        exact = build_model(frames if frames > 1 else CONFIG["video_length"], weights).double()
        set_float64_tables(exact, frames, height // P, width // P)
        embeddings.get_timestep_embedding = float64_timestep_embedding
        try:
            output = run(exact, x, t, text, case_mask, temporal)
        finally:
            embeddings.get_timestep_embedding = stock_timestep_embedding
        records[f"{name}.x"] = x.contiguous()
        records[f"{name}.t"] = t
        records[f"{name}.text"] = text
        if case_mask is not None:
            records[f"{name}.mask"] = case_mask
        records[f"{name}.temporal"] = torch.tensor(int(temporal), dtype=torch.int64)
        records[f"{name}.output"] = output
        records[f"{name}.output_stock"] = output_stock
        print(f"  {name}: output {list(output.shape)}, std {output.std().item():.4f}, "
              f"|float64 tables - stock| {(output - output_stock).abs().max().item():.3g}")
    safetensors_io.save(os.path.join(out, "io.safetensors"), records)
    main_out = records["main.output"]
    print(f"make_diffusers_latte_t2v_fixture: diffusers {diffusers.__version__}; main: samples differ by "
          f"{(main_out[0] - main_out[1]).abs().max().item():.4f}, mask changes sample 1 by "
          f"{(main_out[1] - records['no_mask.output'][1]).abs().max().item():.4f}")


if __name__ == "__main__":
    main()
