#!/usr/bin/env python3
"""Reference outputs for tune's Latte model (tests/models/test_latte.cpp).

An independent float64 implementation of the official Latte forward (Vchitect/Latte, models/latte.py, with
timm's PatchEmbed/Attention/Mlp and DiT's TimestepEmbedder/LabelEmbedder/FinalLayer), written from the formulas
rather than from tune's C++ or the official code, and without einops: the video stays a [B, F, N, D] array
throughout, a spatial block attends along N (patches of a frame), a temporal block along F (frames at a patch),
and the conditioning broadcasts over the other axis, so no frame/patch reordering can be shared with the C++.

Tiny class-conditional config (input_size 8, patch 2, in_channels 4, hidden 32, depth 4, heads 4, num_frames 4,
num_classes 3, learn_sigma, extras 2) with random weights, adaLN and final layers non-zero so they matter.
Writes, under tests/fixtures/latte/:
  config.json        tune's Latte JSON config
  model.safetensors  weights under the official names; Linear/Conv/Embedding weights are rounded to float16 to
                     keep the fixture small (the reference uses the rounded values); pos_embed and temp_embed are
                     the float32 sin-cos tables as the official checkpoints store them
  io.safetensors     x [2, 4, 4, 8, 8] f32, t [2] i64, y [2] i64, output [2, 4, 8, 8, 8] (labels kept),
                     force_drop_ids [2] i64 = [0, 1] and output_dropped (sample 1 given the null class)

Run: .venv/bin/python scripts/make_latte_fixture.py   (deterministic; needs only torch)
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "latte")

CONFIG = dict(model_type="latte", input_size=8, patch_size=2, in_channels=4, hidden_size=32, depth=4, num_heads=4,
              mlp_ratio=4.0, num_frames=4, class_dropout_prob=0.1, num_classes=3, learn_sigma=True, extras=2)
FREQ_DIM = 256
EPS = 1e-6


def sincos(dim, positions):
    """[len(positions), dim]: sin of position * 10000^(-i/(dim/2)) for i < dim/2, then the cosines."""
    rows = []
    for pos in positions:
        row_sin, row_cos = [], []
        for i in range(dim // 2):
            angle = float(pos) / (10000.0 ** (i / (dim / 2.0)))
            row_sin.append(math.sin(angle))
            row_cos.append(math.cos(angle))
        rows.append(row_sin + row_cos)
    return torch.tensor(rows, dtype=torch.float64)


def pos_embed_table(dim, grid):
    """Patch (row r, column c) at index r * grid + c: [sincos(dim/2, c), sincos(dim/2, r)] (MAE's meshgrid(w, h))."""
    rows = []
    for r in range(grid):
        for c in range(grid):
            rows.append(torch.cat([sincos(dim // 2, [c])[0], sincos(dim // 2, [r])[0]]))
    return torch.stack(rows)


def make_weights(cfg, gen):
    D, C, p = cfg["hidden_size"], cfg["in_channels"], cfg["patch_size"]
    out_ch = 2 * C if cfg["learn_sigma"] else C
    inner = int(D * cfg["mlp_ratio"])

    def rnd(*shape, scale):
        return (torch.randn(*shape, generator=gen, dtype=torch.float64) * scale).to(torch.float16)

    w = {}
    w["x_embedder.proj.weight"] = rnd(D, C, p, p, scale=1.0 / math.sqrt(C * p * p))
    w["x_embedder.proj.bias"] = rnd(D, scale=0.1)
    w["t_embedder.mlp.0.weight"] = rnd(D, FREQ_DIM, scale=1.0 / math.sqrt(FREQ_DIM))
    w["t_embedder.mlp.0.bias"] = rnd(D, scale=0.1)
    w["t_embedder.mlp.2.weight"] = rnd(D, D, scale=1.0 / math.sqrt(D))
    w["t_embedder.mlp.2.bias"] = rnd(D, scale=0.1)
    w["y_embedder.embedding_table.weight"] = rnd(cfg["num_classes"] + 1, D, scale=1.0)
    grid = cfg["input_size"] // p
    w["pos_embed"] = pos_embed_table(D, grid).unsqueeze(0).to(torch.float32)
    w["temp_embed"] = sincos(D, range(cfg["num_frames"])).unsqueeze(0).to(torch.float32)
    for n in range(cfg["depth"]):
        b = f"blocks.{n}."
        w[b + "attn.qkv.weight"] = rnd(3 * D, D, scale=1.0 / math.sqrt(D))
        w[b + "attn.qkv.bias"] = rnd(3 * D, scale=0.1)
        w[b + "attn.proj.weight"] = rnd(D, D, scale=1.0 / math.sqrt(D))
        w[b + "attn.proj.bias"] = rnd(D, scale=0.1)
        w[b + "mlp.fc1.weight"] = rnd(inner, D, scale=1.0 / math.sqrt(D))
        w[b + "mlp.fc1.bias"] = rnd(inner, scale=0.1)
        w[b + "mlp.fc2.weight"] = rnd(D, inner, scale=1.0 / math.sqrt(inner))
        w[b + "mlp.fc2.bias"] = rnd(D, scale=0.1)
        w[b + "adaLN_modulation.1.weight"] = rnd(6 * D, D, scale=0.4 / math.sqrt(D))
        w[b + "adaLN_modulation.1.bias"] = rnd(6 * D, scale=0.2)
    w["final_layer.linear.weight"] = rnd(p * p * out_ch, D, scale=1.0 / math.sqrt(D))
    w["final_layer.linear.bias"] = rnd(p * p * out_ch, scale=0.1)
    w["final_layer.adaLN_modulation.1.weight"] = rnd(2 * D, D, scale=0.4 / math.sqrt(D))
    w["final_layer.adaLN_modulation.1.bias"] = rnd(2 * D, scale=0.2)
    return w


def linear(x, w, name):
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def silu(x):
    return x / (1.0 + torch.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + EPS)


def timestep_sinusoid(t, dim):
    half = dim // 2
    rows = []
    for value in t.tolist():
        freqs = [math.exp(-math.log(10000.0) * i / half) for i in range(half)]
        rows.append([math.cos(value * f) for f in freqs] + [math.sin(value * f) for f in freqs])
    return torch.tensor(rows, dtype=torch.float64)


def attention_along(h, w, name, heads, axis):
    """Self-attention of h [B, F, N, D] along `axis` (1: frames, 2: patches), each other index independent."""
    D = h.shape[-1]
    hd = D // heads
    qkv = linear(h, w, name + ".qkv")
    q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
    out = torch.zeros_like(h)
    for head in range(heads):
        sl = slice(head * hd, (head + 1) * hd)
        qh, kh, vh = q[..., sl], k[..., sl], v[..., sl]
        if axis == 2:
            scores = torch.einsum("bfnd,bfmd->bfnm", qh, kh) / math.sqrt(hd)
            probs = torch.softmax(scores, -1)
            out[..., sl] = torch.einsum("bfnm,bfmd->bfnd", probs, vh)
        else:
            scores = torch.einsum("bfnd,bgnd->bnfg", qh, kh) / math.sqrt(hd)
            probs = torch.softmax(scores, -1)
            out[..., sl] = torch.einsum("bnfg,bgnd->bfnd", probs, vh)
    return linear(out, w, name + ".proj")


def block(h, c, w, n, heads, axis):
    """adaLN-Zero block on h [B, F, N, D]; c [B, D] broadcast over frames and patches."""
    mod = linear(silu(c), w, f"blocks.{n}.adaLN_modulation.1")
    D = h.shape[-1]
    shift1, scale1, gate1, shift2, scale2, gate2 = [mod[:, i * D:(i + 1) * D][:, None, None, :] for i in range(6)]
    h = h + gate1 * attention_along(layer_norm(h) * (1 + scale1) + shift1, w, f"blocks.{n}.attn", heads, axis)
    m = layer_norm(h) * (1 + scale2) + shift2
    m = linear(gelu_tanh(linear(m, w, f"blocks.{n}.mlp.fc1")), w, f"blocks.{n}.mlp.fc2")
    return h + gate2 * m


def forward(cfg, w, x, t, labels):
    B, F, C, H, W = x.shape
    p = cfg["patch_size"]
    g = H // p
    D = cfg["hidden_size"]
    out_ch = 2 * C if cfg["learn_sigma"] else C
    # Patches: token (r, s) of frame (b, f) is x[b, f, :, r*p:(r+1)*p, s*p:(s+1)*p] flattened (c, i, j).
    weight = w["x_embedder.proj.weight"].reshape(D, -1)
    h = torch.zeros(B, F, g * g, D, dtype=torch.float64)
    for r in range(g):
        for s in range(g):
            patch = x[:, :, :, r * p:(r + 1) * p, s * p:(s + 1) * p].reshape(B, F, -1)
            h[:, :, r * g + s] = patch @ weight.T + w["x_embedder.proj.bias"]
    h = h + w["pos_embed"][0]
    t_emb = linear(silu(linear(timestep_sinusoid(t, FREQ_DIM), w, "t_embedder.mlp.0")), w, "t_embedder.mlp.2")
    c = t_emb + w["y_embedder.embedding_table.weight"][labels]
    for n in range(cfg["depth"]):
        if n % 2 == 0:
            h = block(h, c, w, n, cfg["num_heads"], axis=2)
        else:
            if n == 1:
                h = h + w["temp_embed"][0][None, :, None, :]
            h = block(h, c, w, n, cfg["num_heads"], axis=1)
    mod = linear(silu(c), w, "final_layer.adaLN_modulation.1")
    shift, scale = mod[:, None, None, :D], mod[:, None, None, D:]
    tokens = linear(layer_norm(h) * (1 + scale) + shift, w, "final_layer.linear")  # [B, F, N, p*p*out]
    out = torch.zeros(B, F, out_ch, H, W, dtype=torch.float64)
    for r in range(g):
        for s in range(g):
            piece = tokens[:, :, r * g + s].reshape(B, F, p, p, out_ch)  # (i, j, channel)
            out[:, :, :, r * p:(r + 1) * p, s * p:(s + 1) * p] = piece.permute(0, 1, 4, 2, 3)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(20240607)
    w = make_weights(CONFIG, gen)
    w64 = {k: v.to(torch.float64) for k, v in w.items()}
    B, F, C, S = 2, CONFIG["num_frames"], CONFIG["in_channels"], CONFIG["input_size"]
    x = torch.randn(B, F, C, S, S, generator=gen, dtype=torch.float32)
    t = torch.tensor([11, 742], dtype=torch.int64)
    y = torch.tensor([2, 0], dtype=torch.int64)
    force_drop_ids = torch.tensor([0, 1], dtype=torch.int64)
    output = forward(CONFIG, w64, x.to(torch.float64), t, y)
    dropped = torch.where(force_drop_ids == 1, torch.full_like(y, CONFIG["num_classes"]), y)
    output_dropped = forward(CONFIG, w64, x.to(torch.float64), t, dropped)

    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    safetensors_io.save(os.path.join(OUT, "model.safetensors"), w, metadata={"format": "pt"})
    safetensors_io.save(os.path.join(OUT, "io.safetensors"),
                        {"x": x, "t": t, "y": y, "output": output.to(torch.float32),
                         "force_drop_ids": force_drop_ids, "output_dropped": output_dropped.to(torch.float32)})
    print("output std", output.std().item(), "max", output.abs().max().item(),
          "dropped diff", (output - output_dropped).abs().max().item())


if __name__ == "__main__":
    main()
