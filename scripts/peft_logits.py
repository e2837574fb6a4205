#!/usr/bin/env python3
"""Logits of a base model with a LoRA adapter applied by PEFT: the reference for adapters tune writes
(tests/models/test_peft_reference.cpp).

Usage: peft_logits.py BASE_DIR ADAPTER_DIR INPUT OUT
  INPUT  safetensors with input_ids [batch, length]
  OUT    safetensors written with logits [batch, length, vocab] float32
"""
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    base_dir, adapter_dir, input_path, out_path = sys.argv[1:]
    logging.disable_progress_bar()  # the calling test's log stays readable
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, adapter_dir).eval()
    with torch.no_grad():
        logits = model(load_file(input_path)["input_ids"]).logits
    save_file({"logits": logits.contiguous()}, out_path)


if __name__ == "__main__":
    main()
