#!/usr/bin/env python3
"""Logits of a base model with a LoRA adapter applied by PEFT: the reference for adapters tune writes
(tests/models/test_peft_reference.cpp; tests/recipes/test_qlora.cpp for a base transformers saved with bitsandbytes
4-bit, which loads 4-bit here: its dense tensors made fp32, every Linear4bit computing in fp32, in train mode so
bitsandbytes multiplies the dequantised weights rather than repacking them for its bf16 CPU kernel; the adapter's
dropout must be 0).

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
    quantised = getattr(base.config, "quantization_config", None) is not None
    if quantised:
        import bitsandbytes as bnb
        for parameter in base.parameters():
            if not isinstance(parameter, bnb.nn.Params4bit) and parameter.is_floating_point():
                parameter.data = parameter.data.float()  # saved bf16, exact in fp32
        for module in base.modules():
            if isinstance(module, bnb.nn.Linear4bit):
                module.compute_dtype = torch.float32
    model = PeftModel.from_pretrained(base, adapter_dir)
    model.train() if quantised else model.eval()
    with torch.no_grad():
        logits = model(load_file(input_path)["input_ids"]).logits
    save_file({"logits": logits.contiguous()}, out_path)


if __name__ == "__main__":
    main()
