#!/usr/bin/env python3
"""Reference outputs for tune's Latte model from Hugging Face diffusers' LatteTransformer3DModel (a second
reference besides scripts/make_latte_fixture.py; read by tests/models/test_latte_diffusers.cpp).

    .venv/bin/python scripts/make_diffusers_latte_fixture.py --out DIR     (deterministic; run by CTest)

diffusers ports Latte's text-to-video variant (Vchitect/Latte models/latte_t2v.py, PixArt-alpha style), not the
class-conditional models/latte.py that tune implements. Configured with no cross-attention (cross_attention_dim
None: its spatial blocks then hold self-attention only), tanh-GELU MLPs, biased q/k/v, norm eps 1e-6 without
affine, and out_channels = 2 * in_channels (learn_sigma), the per-token maths is the official unconditional model
(extras 1): same patch embedding and 2-D sin-cos table, same 1-D sin-cos temporal table added before the first
temporal block, same DiT timestep embedder, same adaLN-Zero blocks (shift, scale, gate x 2, in that order),
spatial/temporal alternation, frame/patch reordering and unpatchify. Two parameterisations differ:
  - block modulation: diffusers computes one shared linear(silu(t_emb)) -> 6D (adaln_single.linear) and adds a
    per-block table [6, D]; the official has a per-block linear. Mapped exactly: every block's
    adaLN_modulation.1.weight = the shared weight, its bias = the shared bias + the block's table (flattened);
  - final layer: diffusers' shift/scale = scale_shift_table + t_emb (no SiLU, no linear), the official's
    linear(silu(c)). Not expressible by the official weights for all t, but for one timestep it is a constant:
    the fixture stores final_layer.adaLN_modulation.1.weight = 0 (and sample 0's bias) and, per sample k, the
    bias final_bias[k] = [table[0] + t_emb_k, table[1] + t_emb_k]; the test runs each sample with its own bias.
Names: pos_embed.proj -> x_embedder.proj; the pos_embed.pos_embed / temp_pos_embed buffers -> pos_embed /
temp_embed; adaln_single.emb.timestep_embedder.linear_{1,2} -> t_embedder.mlp.{0,2}; transformer_blocks.i ->
blocks.2i and temporal_transformer_blocks.i -> blocks.2i+1 with attn1.to_{q,k,v} concatenated -> attn.qkv,
attn1.to_out.0 -> attn.proj, ff.net.0.proj -> mlp.fc1, ff.net.2 -> mlp.fc2; proj_out -> final_layer.linear.
Unused: caption_projection (its output feeds no block without cross-attention; a dummy caption is passed).

Tiny config as make_latte_fixture.py's (input_size 8, patch 2, in_channels 4, hidden 32, depth 4 = 2 spatial +
2 temporal, heads 4, num_frames 4, learn_sigma) with diffusers' own random initialisation (seeded; nothing zero),
the weights kept as float32 and the forward run in float64. Writes, under DIR:
  config.json        tune's Latte JSON config (extras 1)
  model.safetensors  the weights under tune's (official) names, float64 (sums of float32 values)
  io.safetensors     x [2, 4, 4, 8, 8] f64 in tune's layout [B, F, C, H, W] (diffusers' is [B, C, F, H, W]),
                     t [2] f64, final_bias [2, 64] f64, output [2, 4, 8, 8, 8] f64 (tune's layout)
If diffusers is not installed, writes DIR/SKIPPED with the reason instead and exits 0; the test then exits 77
(reported skipped by CTest, never passed).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_output  # noqa: E402
import safetensors_io  # noqa: E402

CONFIG = dict(model_type="latte", input_size=8, patch_size=2, in_channels=4, hidden_size=32, depth=4, num_heads=4,
              mlp_ratio=4.0, num_frames=4, class_dropout_prob=0.1, num_classes=3, learn_sigma=True, extras=1)


def build_model():
    from diffusers import LatteTransformer3DModel
    c = CONFIG
    torch.manual_seed(20240607)
    model = LatteTransformer3DModel(
        num_attention_heads=c["num_heads"], attention_head_dim=c["hidden_size"] // c["num_heads"],
        in_channels=c["in_channels"], out_channels=2 * c["in_channels"], num_layers=c["depth"] // 2,
        cross_attention_dim=None, attention_bias=True, sample_size=c["input_size"], patch_size=c["patch_size"],
        activation_fn="gelu-approximate", norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6,
        caption_channels=8, video_length=c["num_frames"])
    # diffusers' default init leaves biases random (nn.Linear's) and nothing zero; make the biases a little
    # larger so they matter in the comparison.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def tune_weights(model):
    sd = {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}
    buffers = dict(model.named_buffers())
    D = CONFIG["hidden_size"]
    w = {
        "x_embedder.proj.weight": sd["pos_embed.proj.weight"],
        "x_embedder.proj.bias": sd["pos_embed.proj.bias"],
        "pos_embed": buffers["pos_embed.pos_embed"].to(torch.float64),
        "temp_embed": buffers["temp_pos_embed"].to(torch.float64),
        "t_embedder.mlp.0.weight": sd["adaln_single.emb.timestep_embedder.linear_1.weight"],
        "t_embedder.mlp.0.bias": sd["adaln_single.emb.timestep_embedder.linear_1.bias"],
        "t_embedder.mlp.2.weight": sd["adaln_single.emb.timestep_embedder.linear_2.weight"],
        "t_embedder.mlp.2.bias": sd["adaln_single.emb.timestep_embedder.linear_2.bias"],
        "final_layer.linear.weight": sd["proj_out.weight"],
        "final_layer.linear.bias": sd["proj_out.bias"],
        "final_layer.adaLN_modulation.1.weight": torch.zeros(2 * D, D, dtype=torch.float64),
    }
    for i in range(CONFIG["depth"] // 2):
        for src, dst in ((f"transformer_blocks.{i}.", f"blocks.{2 * i}."),
                         (f"temporal_transformer_blocks.{i}.", f"blocks.{2 * i + 1}.")):
            for kind in ("weight", "bias"):
                w[dst + f"attn.qkv.{kind}"] = torch.cat([sd[src + f"attn1.to_{x}.{kind}"] for x in "qkv"])
                w[dst + f"attn.proj.{kind}"] = sd[src + f"attn1.to_out.0.{kind}"]
                w[dst + f"mlp.fc1.{kind}"] = sd[src + f"ff.net.0.proj.{kind}"]
                w[dst + f"mlp.fc2.{kind}"] = sd[src + f"ff.net.2.{kind}"]
            w[dst + "adaLN_modulation.1.weight"] = sd["adaln_single.linear.weight"]
            w[dst + "adaLN_modulation.1.bias"] = sd["adaln_single.linear.bias"] + sd[src + "scale_shift_table"].reshape(-1)
    used = {"pos_embed.proj.weight", "pos_embed.proj.bias", "adaln_single.linear.weight", "adaln_single.linear.bias",
            "proj_out.weight", "proj_out.bias", "scale_shift_table"}
    used |= {k for k in sd if k.startswith(("adaln_single.emb.", "transformer_blocks.", "temporal_transformer_blocks."))}
    unused = sorted(k for k in sd if k not in used and not k.startswith("caption_projection."))
    if unused:
        raise SystemExit(f"make_diffusers_latte_fixture: unmapped diffusers tensors {unused}")
    return {k: v.contiguous() for k, v in w.items()}


def main():
    out_dir = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    if fixture_output.skipped_without(out_dir, "make_diffusers_latte_fixture", "diffusers"):
        return
    import diffusers

    model = build_model()
    weights = tune_weights(model)
    model = model.double()
    B, F, C, S = 2, CONFIG["num_frames"], CONFIG["in_channels"], CONFIG["input_size"]
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(B, F, C, S, S, generator=gen, dtype=torch.float64)  # tune's layout
    t = torch.tensor([11.0, 742.0], dtype=torch.float64)
    caption = torch.zeros(B, 1, 8, dtype=torch.float64)
    captured = {}
    handle = model.adaln_single.register_forward_hook(lambda mod, inp, out: captured.update(t_emb=out[1]))
    with torch.no_grad():
        out = model(x.permute(0, 2, 1, 3, 4), timestep=t, encoder_hidden_states=caption, return_dict=False)[0]
    handle.remove()
    output = out.permute(0, 2, 1, 3, 4).contiguous()  # [B, C, F, H, W] -> [B, F, C, H, W]
    table = model.scale_shift_table.detach()  # [2, D]: shift, scale
    t_emb = captured["t_emb"]  # [B, D]
    final_bias = torch.cat([table[0] + t_emb, table[1] + t_emb], dim=1)  # [B, 2D]
    weights["final_layer.adaLN_modulation.1.bias"] = final_bias[0].contiguous()  # sample 0's; the test sets each

    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    safetensors_io.save(os.path.join(out_dir, "model.safetensors"), weights, metadata={"format": "pt"})
    safetensors_io.save(os.path.join(out_dir, "io.safetensors"),
                        {"x": x, "t": t, "final_bias": final_bias.contiguous(), "output": output})
    print(f"make_diffusers_latte_fixture: diffusers {diffusers.__version__}, output std {output.std().item():.4f}, "
          f"max {output.abs().max().item():.4f}, samples differ by {(output[0] - output[1]).abs().max().item():.4f}")


if __name__ == "__main__":
    main()
