#!/usr/bin/env python3
"""Reference logits for tune's Llama-family model (tests/models/test_llama.cpp).

An independent float64 implementation of Hugging Face's LlamaForCausalLM / Qwen2ForCausalLM forward, written
from the published formulas (not from tune's C++ and not from transformers' code): RMSNorm, RoPE as a rotation
of the pairs (i, i + d/2) with Llama 3 frequency scaling, grouped-query attention computed head by head with an
explicit causal mask, SwiGLU MLP. For each case it writes, under tests/fixtures/llama/<case>/:
  config.json          a Hugging Face config
  model.safetensors    random float32 weights under HF tensor names
  io.safetensors       input_ids [2, 7], position_ids [2, 7] (row 1 starts at 50 to exercise RoPE at larger
                       angles) and the reference logits [2, 7, vocab] computed in float64, stored as float32.

Run: .venv/bin/python scripts/make_llama_fixture.py   (deterministic; needs only torch)
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "llama")

CASES = {
    # Plain Llama 2 style: grouped-query attention (4 heads share 2 kv heads), untied lm_head.
    "llama": dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=96, hidden_size=32,
                  intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=None,
                  tie_word_embeddings=False, attention_bias=False, mlp_bias=False, bos_token_id=1,
                  eos_token_id=2, hidden_act="silu", torch_dtype="float32"),
    # Llama 3 style: rope_scaling "llama3" with original_max_position_embeddings small enough that the head
    # dimension's four frequencies fall in all three bands (kept, interpolated, divided by factor); tied
    # embeddings; multi-query attention (1 kv head); eos as a list.
    "llama3_tied": dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=96, hidden_size=32,
                        intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                        max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                        tie_word_embeddings=True, attention_bias=False, mlp_bias=False, bos_token_id=1,
                        eos_token_id=[2, 3], hidden_act="silu", torch_dtype="float32"),
    # Qwen2: q/k/v biases (no o_proj bias), large rope_theta, no attention_bias field in its config.
    "qwen2": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], vocab_size=80, hidden_size=32,
                  intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None,
                  tie_word_embeddings=False, use_sliding_window=False, sliding_window=None, max_window_layers=2,
                  bos_token_id=0, eos_token_id=1, hidden_act="silu", torch_dtype="float32"),
}


def make_weights(cfg, generator):
    """Random float32 weights with HF names; scales chosen so attention and norms are far from trivial."""
    hidden, inner = cfg["hidden_size"], cfg["intermediate_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = hidden // heads
    qwen2 = cfg["model_type"] == "qwen2"
    qkv_bias = qwen2 or cfg.get("attention_bias", False)
    o_bias = cfg.get("attention_bias", False) and not qwen2

    def randn(*shape, std):
        return (torch.randn(*shape, generator=generator, dtype=torch.float64) * std).float()

    # Tied: the embedding is also the output head; a smaller scale keeps logits at the size of the untied
    # cases (|logit| < 10) rather than ~25, where fp32 rounding alone approaches the tests' 1e-4.
    embed_std = 0.4 if cfg["tie_word_embeddings"] else 1.0
    w = {"model.embed_tokens.weight": randn(cfg["vocab_size"], hidden, std=embed_std)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = randn(heads * head_dim, hidden, std=0.35)
        if qkv_bias:
            w[p + "self_attn.q_proj.bias"] = randn(heads * head_dim, std=0.3)
        w[p + "self_attn.k_proj.weight"] = randn(kv_heads * head_dim, hidden, std=0.35)
        if qkv_bias:
            w[p + "self_attn.k_proj.bias"] = randn(kv_heads * head_dim, std=0.3)
        w[p + "self_attn.v_proj.weight"] = randn(kv_heads * head_dim, hidden, std=0.25)
        if qkv_bias:
            w[p + "self_attn.v_proj.bias"] = randn(kv_heads * head_dim, std=0.3)
        w[p + "self_attn.o_proj.weight"] = randn(hidden, heads * head_dim, std=0.25)
        if o_bias:
            w[p + "self_attn.o_proj.bias"] = randn(hidden, std=0.3)
        w[p + "mlp.gate_proj.weight"] = randn(inner, hidden, std=0.25)
        w[p + "mlp.up_proj.weight"] = randn(inner, hidden, std=0.25)
        w[p + "mlp.down_proj.weight"] = randn(hidden, inner, std=0.2)
        w[p + "input_layernorm.weight"] = 1.0 + randn(hidden, std=0.2)
        w[p + "post_attention_layernorm.weight"] = 1.0 + randn(hidden, std=0.2)
    w["model.norm.weight"] = 1.0 + randn(hidden, std=0.2)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = randn(cfg["vocab_size"], hidden, std=0.3)
    return w


def rms_norm(x, weight, eps):
    return weight * (x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps))


def inverse_frequencies(cfg, head_dim):
    """theta^(-2i/d), then Llama 3's per-wavelength rescaling (Meta's apply_scaling, elementwise)."""
    freqs = [cfg["rope_theta"] ** (-(2.0 * i) / head_dim) for i in range(head_dim // 2)]
    scaling = cfg.get("rope_scaling")
    if scaling:
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        out = []
        for f in freqs:
            wavelength = 2.0 * math.pi / f
            if wavelength < old / high:
                out.append(f)
            elif wavelength > old / low:
                out.append(f / factor)
            else:
                smooth = (old / wavelength - low) / (high - low)
                out.append((1.0 - smooth) * f / factor + smooth * f)
        freqs = out
    return torch.tensor(freqs, dtype=torch.float64)


def rope(x, positions, inv_freq):
    """x [T, d]: rotate each pair (x[k], x[k + d/2]) by the angle position * inv_freq[k]."""
    half = x.shape[-1] // 2
    angle = positions.double()[:, None] * inv_freq[None, :]
    a, b = x[:, :half], x[:, half:]
    c, s = torch.cos(angle), torch.sin(angle)
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def forward(cfg, weights, input_ids, position_ids):
    w = {k: v.double() for k, v in weights.items()}
    hidden = cfg["hidden_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = hidden // heads
    eps = cfg["rms_norm_eps"]
    inv_freq = inverse_frequencies(cfg, head_dim)

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    batch_logits = []
    for ids, positions in zip(input_ids, position_ids):
        length = ids.shape[0]
        h = w["model.embed_tokens.weight"][ids]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
            q = linear(x, p + "self_attn.q_proj")
            k = linear(x, p + "self_attn.k_proj")
            v = linear(x, p + "self_attn.v_proj")
            outputs = []
            for head in range(heads):
                kv = head // (heads // kv_heads)  # query heads are grouped consecutively onto kv heads
                qh = rope(q[:, head * head_dim:(head + 1) * head_dim], positions, inv_freq)
                kh = rope(k[:, kv * head_dim:(kv + 1) * head_dim], positions, inv_freq)
                vh = v[:, kv * head_dim:(kv + 1) * head_dim]
                scores = (qh @ kh.T) / math.sqrt(head_dim)
                future = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
                scores = scores.masked_fill(future, float("-inf"))
                outputs.append(torch.softmax(scores, dim=-1) @ vh)
            h = h + linear(torch.cat(outputs, dim=-1), p + "self_attn.o_proj")
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
            gate = linear(x, p + "mlp.gate_proj")
            h = h + linear(gate * torch.sigmoid(gate) * linear(x, p + "mlp.up_proj"), p + "mlp.down_proj")
        h = rms_norm(h, w["model.norm.weight"], eps)
        head_weight = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
        batch_logits.append(h @ head_weight.T)
    return torch.stack(batch_logits)


def main():
    total = 0
    for index, (name, cfg) in enumerate(CASES.items()):
        generator = torch.Generator().manual_seed(1234 + index)
        weights = make_weights(cfg, generator)
        input_ids = torch.randint(0, cfg["vocab_size"], (2, 7), generator=generator, dtype=torch.int64)
        position_ids = torch.stack([torch.arange(0, 7), torch.arange(50, 57)]).to(torch.int64)
        logits = forward(cfg, weights, input_ids, position_ids)
        directory = os.path.join(ROOT, name)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        safetensors_io.save(os.path.join(directory, "model.safetensors"), weights, {"format": "pt"})
        safetensors_io.save(os.path.join(directory, "io.safetensors"),
                            {"input_ids": input_ids, "position_ids": position_ids, "logits": logits.float()})
        for file in os.listdir(directory):
            total += os.path.getsize(os.path.join(directory, file))
        print(f"{name}: logits std {logits.std():.3f}, max |logit| {logits.abs().max():.3f}")
    print(f"fixture size: {total} bytes")


if __name__ == "__main__":
    main()
