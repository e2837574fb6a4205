#!/usr/bin/env python3
"""Reference outputs for tune's Sana transformer (src/tune/models/sana.h) from Hugging Face diffusers'
SanaTransformer2DModel (read by tests/models/test_sana.cpp).

    .venv/bin/python scripts/make_diffusers_sana_fixture.py --out DIR     (deterministic; run by CTest)

Three tiny seeded models with Sana's released config apart from the sizes (2 layers, 2 linear-attention heads of 8,
2 cross-attention heads of 12 (cross inner 24 != inner 16), caption_channels 12, mlp_ratio 2.5 (GLUMBConv hidden 40),
in / out 4 channels), every parameter randomised, each saved with save_pretrained as a diffusers transformer folder:
  DIR/plain/      patch 1, no position embedding (Sana 1.0 at 512 / 1024 px)
  DIR/qk_norm/    the same with qk_norm "rms_norm_across_heads" (Sana 1.5)
  DIR/pos_embed/  patch 2 with interpolation_scale 1.0 (the 2K model's sin-cos table), sample_size 8
with config.json and diffusion_pytorch_model.safetensors (float32 weights). Outputs, run in float64
(model.double()), in DIR/io.safetensors per case CASE:
  CASE.x       [B, 4, H, W] f64 latents          CASE.t     [B] timesteps (int64, or float64 for "fractional")
  CASE.text    [B, L, 12] f64 captions (L = 6)   CASE.mask  [B, L] int64, 1 = attend (absent: no mask)
  CASE.output  [B, 4, H, W] f64: diffusers with its float32 timestep sinusoid / table replaced by float64
  CASE.output_stock  diffusers exactly as shipped
Cases: main (plain, 8x8, t 11 and 742, the second caption padded after 3 tokens), no_mask, fractional (plain,
t 11.5 and 742.25, 8x6), qk_norm (qk_norm model, main's inputs), pos_embed (pos_embed model, 12x8 latents, whose
6x4 patch grid differs from the 4x4 base grid, so diffusers recomputes its table).

As the Latte-1 fixture: diffusers computes the timestep sinusoid (get_timestep_embedding) and the stored sin-cos
table in float32 whatever the model's dtype; "output" patches both to float64 from diffusers' own formulas so the
comparison can be tight (tune computes both in float64). "output_stock" is diffusers untouched.

The official checkpoint layout: DIR/official_{plain,qk_norm}.pth hold the plain and qk_norm models' weights under
the official NVlabs names (fused attn.qkv and cross_attn.kv_linear, mlp.*_conv.conv, t_embedder, y_embedder, ...,
plus the y_embedding / pos_embed tensors diffusers' converter drops), written here from the official module layout,
and DIR/converted_{plain,qk_norm}/ is what scripts/convert_sana_official.py makes of them: test_sana loads those and
compares with the "main" and "qk_norm" outputs.

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

BASE = dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=2,
            num_cross_attention_heads=2, cross_attention_head_dim=12, cross_attention_dim=16, caption_channels=12,
            mlp_ratio=2.5, dropout=0.0, attention_bias=False, sample_size=8, patch_size=1,
            norm_elementwise_affine=False, norm_eps=1e-6, interpolation_scale=None, qk_norm=None)
MODELS = {
    "plain": BASE,
    "qk_norm": dict(BASE, qk_norm="rms_norm_across_heads"),
    "pos_embed": dict(BASE, patch_size=2, interpolation_scale=1.0),
}
TEXT_LENGTH = 6


def randomise(model, seed):
    """Every tensor random at a size that matters (diffusers zero-initialises nothing here, but its scale-shift
    tables and norms would start at trivial values)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p[0].numel() if p.dim() > 1 else p.shape[-1]
            if name.endswith("bias"):
                std = 0.2
            elif p.dim() == 1:  # RMSNorm weights (caption_norm, norm_q, norm_k): around 1
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=generator))
                continue
            else:
                std = 1.0 / math.sqrt(fan_in)
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
    return emb


def set_float64_table(model, grid_height, grid_width):
    from diffusers.models.embeddings import get_2d_sincos_pos_embed
    embed = model.patch_embed
    if embed.pos_embed is None:
        return
    dim = embed.pos_embed.shape[-1]
    embed.height, embed.width = grid_height, grid_width  # so forward uses the buffer instead of recomputing
    embed.pos_embed = get_2d_sincos_pos_embed(dim, (grid_height, grid_width), base_size=embed.base_size,
                                              interpolation_scale=embed.interpolation_scale,
                                              output_type="pt").to(torch.float64).unsqueeze(0)


def official_state_dict(weights, layers, qk_norm):
    """The diffusers weights under the official SanaMS names (NVlabs/Sana diffusion/model/nets/sana_multi_scale.py)."""
    w = dict(weights)
    out = {"x_embedder.proj.weight": w.pop("patch_embed.proj.weight"), "x_embedder.proj.bias": w.pop("patch_embed.proj.bias"),
           "t_block.1.weight": w.pop("time_embed.linear.weight"), "t_block.1.bias": w.pop("time_embed.linear.bias"),
           "attention_y_norm.weight": w.pop("caption_norm.weight"),
           "final_layer.linear.weight": w.pop("proj_out.weight"), "final_layer.linear.bias": w.pop("proj_out.bias"),
           "final_layer.scale_shift_table": w.pop("scale_shift_table")}
    for i, mlp in ((1, "0"), (2, "2")):
        for kind in ("weight", "bias"):
            out[f"t_embedder.mlp.{mlp}.{kind}"] = w.pop(f"time_embed.emb.timestep_embedder.linear_{i}.{kind}")
            out[f"y_embedder.y_proj.fc{i}.{kind}"] = w.pop(f"caption_projection.linear_{i}.{kind}")
    for i in range(layers):
        b, o = f"transformer_blocks.{i}", f"blocks.{i}"
        out[f"{o}.scale_shift_table"] = w.pop(f"{b}.scale_shift_table")
        out[f"{o}.attn.qkv.weight"] = torch.cat([w.pop(f"{b}.attn1.to_{n}.weight") for n in "qkv"])
        out[f"{o}.attn.proj.weight"] = w.pop(f"{b}.attn1.to_out.0.weight")
        out[f"{o}.attn.proj.bias"] = w.pop(f"{b}.attn1.to_out.0.bias")
        for new, old in (("conv_inverted", "inverted_conv"), ("conv_depth", "depth_conv"), ("conv_point", "point_conv")):
            for kind in ("weight", "bias"):
                if f"{b}.ff.{new}.{kind}" in w:
                    out[f"{o}.mlp.{old}.conv.{kind}"] = w.pop(f"{b}.ff.{new}.{kind}")
        out[f"{o}.cross_attn.q_linear.weight"] = w.pop(f"{b}.attn2.to_q.weight")
        out[f"{o}.cross_attn.q_linear.bias"] = w.pop(f"{b}.attn2.to_q.bias")
        out[f"{o}.cross_attn.kv_linear.weight"] = torch.cat([w.pop(f"{b}.attn2.to_k.weight"), w.pop(f"{b}.attn2.to_v.weight")])
        out[f"{o}.cross_attn.kv_linear.bias"] = torch.cat([w.pop(f"{b}.attn2.to_k.bias"), w.pop(f"{b}.attn2.to_v.bias")])
        out[f"{o}.cross_attn.proj.weight"] = w.pop(f"{b}.attn2.to_out.0.weight")
        out[f"{o}.cross_attn.proj.bias"] = w.pop(f"{b}.attn2.to_out.0.bias")
        if qk_norm:
            for attn, old in (("attn1", "attn"), ("attn2", "cross_attn")):
                out[f"{o}.{old}.q_norm.weight"] = w.pop(f"{b}.{attn}.norm_q.weight")
                out[f"{o}.{old}.k_norm.weight"] = w.pop(f"{b}.{attn}.norm_k.weight")
    assert not w, sorted(w)
    out["y_embedder.y_embedding"] = torch.zeros(TEXT_LENGTH, BASE["caption_channels"])  # dropped by the converter
    return out


def run(model, x, t, text, mask):
    with torch.no_grad():
        return model(x, encoder_hidden_states=text, timestep=t, encoder_attention_mask=mask, return_dict=False)[0]


def main():
    out = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    if fixture_output.skipped_without(out, "make_diffusers_sana_fixture", "torch", "diffusers"):
        return
    import diffusers
    import diffusers.models.embeddings as embeddings
    from diffusers import SanaTransformer2DModel
    import safetensors_io

    weights = {}
    for seed, (name, config) in enumerate(MODELS.items()):
        torch.manual_seed(seed)
        model = SanaTransformer2DModel(**config).eval()
        randomise(model, 20251126 + seed)
        model.save_pretrained(os.path.join(out, name), safe_serialization=True)
        weights[name] = {k: v.clone() for k, v in model.state_dict().items()}

    import subprocess
    converter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "convert_sana_official.py")
    for name in ("plain", "qk_norm"):
        official = os.path.join(out, f"official_{name}.pth")
        torch.save({"state_dict": official_state_dict(weights[name], BASE["num_layers"], name == "qk_norm")}, official)
        subprocess.run([sys.executable, converter, official, os.path.join(out, f"converted_{name}"), "--image-size", "512",
                        "--cross-heads", str(BASE["num_cross_attention_heads"]),
                        "--linear-head-dim", str(BASE["attention_head_dim"])], check=True)

    generator = torch.Generator().manual_seed(7)
    B, C, L = 2, BASE["in_channels"], TEXT_LENGTH
    text = torch.randn(B, L, BASE["caption_channels"], generator=generator, dtype=torch.float64)
    t = torch.tensor([11, 742], dtype=torch.int64)
    t_fractional = torch.tensor([11.5, 742.25], dtype=torch.float64)
    mask = torch.ones(B, L, dtype=torch.int64)
    mask[1, 3:] = 0

    def latents(height, width):
        return torch.randn(B, C, height, width, generator=generator, dtype=torch.float64)

    x = latents(8, 8)
    cases = {  # name: (model, x, t, mask)
        "main": ("plain", x, t, mask),
        "no_mask": ("plain", x, t, None),
        "fractional": ("plain", latents(8, 6), t_fractional, mask),
        "qk_norm": ("qk_norm", x, t, mask),
        "pos_embed": ("pos_embed", latents(12, 8), t, mask),
    }
    stock_timestep_embedding = embeddings.get_timestep_embedding
    records = {}
    for name, (model_name, case_x, case_t, case_mask) in cases.items():
        def build():
            model = SanaTransformer2DModel(**MODELS[model_name])
            model.load_state_dict(weights[model_name])
            return model.eval().double()

        output_stock = run(build(), case_x, case_t, text, case_mask)
        exact = build()
        patch = MODELS[model_name]["patch_size"]
        set_float64_table(exact, case_x.shape[2] // patch, case_x.shape[3] // patch)
        embeddings.get_timestep_embedding = float64_timestep_embedding
        try:
            output = run(exact, case_x, case_t, text, case_mask)
        finally:
            embeddings.get_timestep_embedding = stock_timestep_embedding
        records[f"{name}.x"] = case_x.contiguous()
        records[f"{name}.t"] = case_t
        records[f"{name}.text"] = text
        if case_mask is not None:
            records[f"{name}.mask"] = case_mask
        records[f"{name}.output"] = output
        records[f"{name}.output_stock"] = output_stock
        print(f"  {name}: output {list(output.shape)}, std {output.std().item():.4f}, "
              f"|float64 tables - stock| {(output - output_stock).abs().max().item():.3g}")
    safetensors_io.save(os.path.join(out, "io.safetensors"), records)
    main_out = records["main.output"]
    print(f"make_diffusers_sana_fixture: diffusers {diffusers.__version__}; main: samples differ by "
          f"{(main_out[0] - main_out[1]).abs().max().item():.4f}, mask changes sample 1 by "
          f"{(main_out[1] - records['no_mask.output'][1]).abs().max().item():.4f}")


if __name__ == "__main__":
    main()
