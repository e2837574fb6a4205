#!/usr/bin/env python3
"""A tiny random Gemma2ForCausalLM directory around a SentencePiece tokenizer: what `tune train` takes as model.path
(tests/cli/gemma2_tests.sh).

    .venv/bin/python scripts/make_tiny_gemma2_model.py --tokenizer tokenizer.model --out DIR

Saved by transformers' save_pretrained (2 layers, hidden 32, 4 heads of 16 sharing 2 kv heads, query_pre_attn_scalar
12, a sliding window of 8 on layer 0 shorter than the training rows, soft caps 20 and 10 that the random logits
reach, tied embeddings, the tokenizer's vocabulary and special ids), with tokenizer.model copied beside it. Weights:
transformers' init with the norm offsets drawn (zero offsets would hide a norm computed as plain RMSNorm) and the
embedding scaled up so the final soft cap matters.
"""
import argparse
import shutil

import sentencepiece
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer", required=True, help="a SentencePiece tokenizer.model")
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    pieces = sentencepiece.SentencePieceProcessor(model_file=args.tokenizer)
    config = Gemma2Config(vocab_size=pieces.get_piece_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=12,
                          sliding_window=8, attn_logit_softcapping=20.0, final_logit_softcapping=10.0,
                          max_position_embeddings=256, bos_token_id=pieces.bos_id(), eos_token_id=pieces.eos_id(),
                          pad_token_id=max(pieces.pad_id(), 0), tie_word_embeddings=True)
    torch.manual_seed(args.seed)
    model = Gemma2ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.normal_(0.0, 0.3)
            elif name.endswith("embed_tokens.weight"):
                param.normal_(0.0, 0.3)
    model.save_pretrained(args.out, safe_serialization=True)
    shutil.copy(args.tokenizer, f"{args.out}/tokenizer.model")
    print(f"{args.out}: gemma2, {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")


if __name__ == "__main__":
    main()
