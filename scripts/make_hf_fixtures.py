#!/usr/bin/env python3
"""Hugging Face's own code as the reference for tune's Llama family (tests/models/test_hf_reference.cpp).

Builds tiny seeded models with transformers (float32, eager attention) and saves each with save_pretrained into
OUT/<case>/ (Llama, Llama 3 RoPE, Mistral, Qwen2, Qwen3; sliding windows; a GELU MLP), beside
reference.safetensors holding
  input_ids  [2, 9]                 two prompt rows
  logits     [2, 9, vocab] float32  the transformers forward of input_ids
  greedy_ids [8]                    model.generate(input_ids[:1], do_sample=False, max_new_tokens=8), new tokens only
Also PEFT LoRA adapters on the llama_gqa and qwen3 bases, OUT/<base>_adapter/, with the PEFT model's logits in
their reference.safetensors. The C++ test loads these with tune and compares.

Run: .venv/bin/python scripts/make_hf_fixtures.py --out DIR   (deterministic; CTest runs it as a setup fixture)
"""
import argparse
import os
import shutil

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers.utils import logging

PROMPT_LENGTH = 9
NEW_TOKENS = 8
# Greedy ids are only a fair test if no step's top two logits are within tune's numerical tolerance of each other;
# this margin is 100x the 1e-5 logits tolerance.
MIN_GREEDY_MARGIN = 1e-3

SHAPE = dict(vocab_size=160, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)

# New cases go at the end: a case's seed is 1000 + its index unless SEEDS gives one (a seed whose greedy steps all
# have a clear winner; see greedy()).
CASES = {
    # Grouped-query attention (4 heads share 2 kv heads), untied lm_head.
    "llama_gqa": (LlamaForCausalLM, LlamaConfig(**SHAPE, tie_word_embeddings=False)),
    # Llama 3 RoPE scaling: original_max_position_embeddings 64 puts head_dim 16's eight frequencies in all three
    # bands (kept, interpolated, divided by factor); lm_head tied to the embeddings.
    "llama_tied": (LlamaForCausalLM, LlamaConfig(**SHAPE, tie_word_embeddings=True, rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=64))),
    "mistral": (MistralForCausalLM, MistralConfig(**SHAPE, sliding_window=None)),
    # Qwen2: q/k/v biases (always on, no config field), no o_proj bias.
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(**SHAPE, rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                                            use_sliding_window=False)),
    # Sliding-window attention: a window of 4 is far shorter than the 9 prompt + 8 generated tokens, so both the
    # masked forward and generation (transformers' sliding-window cache keeps the last 3 keys) depend on it.
    "mistral_window": (MistralForCausalLM, MistralConfig(**SHAPE, sliding_window=4)),
    # Qwen2 with the window on layers >= max_window_layers only: layer 0 full, layer 1 sliding.
    "qwen2_window": (Qwen2ForCausalLM, Qwen2Config(**SHAPE, use_sliding_window=True, sliding_window=4,
                                                   max_window_layers=1)),
    # Qwen3: RMSNorm on each query and key head; head_dim 32 given explicitly (not hidden_size / heads = 16);
    # attention_bias off, as in the released models; tied embeddings, as in the small ones.
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(**SHAPE, head_dim=32, tie_word_embeddings=True)),
    # Qwen3 with attention_bias (on q, k, v and o) and a window on layer 1.
    "qwen3_window": (Qwen3ForCausalLM, Qwen3Config(**SHAPE, head_dim=32, attention_bias=True, use_sliding_window=True,
                                                   sliding_window=4, max_window_layers=1)),
    # GELU (tanh approximation) instead of SiLU in the gated MLP, as Gemma-style checkpoints use.
    "llama_gelu": (LlamaForCausalLM, LlamaConfig(**SHAPE, hidden_act="gelu_pytorch_tanh")),
}


SEEDS = {"llama_gelu": 2008}  # 1000 + 8 has a greedy step whose top two logits are 5e-4 apart
# Cases that also get a PEFT LoRA adapter, OUT/<case>_adapter/ (Qwen3: LoRA beside the query/key norms).
ADAPTER_BASES = ("llama_gqa", "qwen3")


def randomize(model, generator):
    """Seeded weights under our control (not transformers' init, which may change between versions), scaled so
    activations stay of order one and the logits are far from uniform."""
    with torch.no_grad():
        for name, param in model.named_parameters():  # tied weights appear once
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                param.copy_(0.2 * noise)
            else:  # matrices and embeddings, [out, in] / [vocab, hidden]: a tied lm_head scales like an untied one
                param.copy_(noise / param.shape[1] ** 0.5)


def greedy(model, prompt):
    """Greedy continuation of one row with no stop token, checking every step's decision is clear."""
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=NEW_TOKENS,
                         eos_token_id=None, pad_token_id=0, return_dict_in_generate=True, output_logits=True)
    new_ids = out.sequences[0, prompt.shape[1]:]
    assert new_ids.numel() == NEW_TOKENS, f"generation stopped early: {new_ids.tolist()}"
    for step, logits in enumerate(out.logits):
        top2 = logits[0].topk(2).values
        margin = (top2[0] - top2[1]).item()
        assert margin > MIN_GREEDY_MARGIN, f"greedy step {step}: top-2 logits {margin:.2e} apart; pick another seed"
    return new_ids


def save_case(directory, model, reference):
    shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(directory, safe_serialization=True)
    save_file({name: tensor.contiguous() for name, tensor in reference.items()},
              os.path.join(directory, "reference.safetensors"))


def make_adapter(base, input_ids, generator, directory):
    """LoRA on q/k/v/o with random lora_B (PEFT initialises it to zero, which would make the adapter a no-op)."""
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                        task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, config).eval()
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) / param.shape[1] ** 0.5)
        logits = peft_model(input_ids).logits
    shutil.rmtree(directory, ignore_errors=True)
    peft_model.save_pretrained(directory, safe_serialization=True)
    save_file({"input_ids": input_ids, "logits": logits.contiguous()}, os.path.join(directory, "reference.safetensors"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory to write the cases into")
    args = parser.parse_args()
    logging.disable_progress_bar()  # CTest logs stay readable
    torch.manual_seed(0)  # PEFT's lora_A init draws from the global generator
    for index, (case, (model_class, config)) in enumerate(CASES.items()):
        generator = torch.Generator().manual_seed(SEEDS.get(case, 1000 + index))
        model = model_class._from_config(config, attn_implementation="eager", dtype=torch.float32).eval()
        randomize(model, generator)
        input_ids = torch.randint(3, config.vocab_size, (2, PROMPT_LENGTH), generator=generator)
        with torch.no_grad():
            logits = model(input_ids).logits
            greedy_ids = greedy(model, input_ids[:1])
        save_case(os.path.join(args.out, case), model,
                  {"input_ids": input_ids, "logits": logits, "greedy_ids": greedy_ids})
        if case in ADAPTER_BASES:
            make_adapter(model, input_ids, generator, os.path.join(args.out, f"{case}_adapter"))
        print(f"{case}: wrote {os.path.join(args.out, case)}")


if __name__ == "__main__":
    main()
