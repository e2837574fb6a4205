"""Writes tests/fixtures/nf4/: bitsandbytes' own NF4 output, the outside truth for src/tune/precision/nf4 and
src/tune/io/bnb_4bit (run with .venv/bin/python; needs bitsandbytes from scripts/requirements.txt; CPU only).

codec.safetensors: for each case in the metadata's "cases" list, the input tensor and what
bitsandbytes.functional.quantize_4bit(quant_type="nf4") made of it on the CPU (packed bytes, absmax, nested
statistics, offset) and what dequantize_4bit gives back, in the input's dtype and (for bf16/fp16 inputs) in float32.
The cases cover odd element counts, a partial last block, bf16/fp16/fp32 inputs, block sizes 32 to 4096, with and
without double quantisation, more than one nested block of 256, all-zero blocks, and fp32 values exactly on the code
book's midpoints (ties) and one float32 step either side.

model_double_quant/ and model_bf16_storage/: tiny Llama models written by transformers' save_pretrained after
from_pretrained(..., quantization_config=BitsAndBytesConfig(load_in_4bit=True, ...)) on the CPU, i.e. exactly what a
user's pre-quantised directory holds (config.json + model.safetensors); the second stores the packed bytes as bf16
(bnb_4bit_quant_storage) without double quantisation and skips down_proj (llm_int8_skip_modules). expected.safetensors
beside each holds bitsandbytes' dequantised weight for every quantised Linear, from QuantState.from_dict on the saved
tensors.
"""
import copy
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

import bitsandbytes as bnb  # noqa: E402
import bitsandbytes.functional as bnb_functional  # noqa: E402
from bitsandbytes.backends.default.ops import _dequantize_4bit_compute  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "nf4")


def nf4_midpoints():
    code = bnb_functional.get_4bit_type("nf4", device="cpu")
    return (code[:-1] + code[1:]) / 2


def ties_input():
    """fp32 blocks of 64 whose scaled values land exactly on the 4-bit bounds: absmax 1 (scale exact) and absmax 2
    (reciprocal 0.5, exact), each midpoint and its float32 neighbours; an all-zero block; a random partial block."""
    mid = nf4_midpoints()
    up = torch.nextafter(mid, torch.full_like(mid, 2.0))
    down = torch.nextafter(mid, torch.full_like(mid, -2.0))
    blocks = []
    for scale in (1.0, 2.0):
        block = torch.cat([torch.tensor([scale, -scale]), mid * scale, up * scale, down * scale])
        blocks.append(torch.cat([block, torch.zeros(64 - block.numel())]))
    blocks.append(torch.zeros(64))
    generator = torch.Generator().manual_seed(3)
    blocks.append(torch.randn(21, generator=generator))
    return torch.cat(blocks)


def cases():
    """(name, input, blocksize, double_quant). Shapes avoid one bitsandbytes 0.50.2 CPU defect: on AVX-512 machines its
    native dequantize_4bit indexes absmax per row when the last dimension is a multiple of 16 but not of the block
    size, which gives wrong values (the quantiser and the CUDA/default kernels are flat); main() checks every
    dequantisation against bitsandbytes' flat default implementation."""
    generator = torch.Generator().manual_seed(0)

    def randn(*shape, dtype, row_scales=False):
        values = torch.randn(*shape, generator=generator)
        if row_scales:  # a spread of block absmaxes, so the nested 8-bit map is used over its range
            values = values * torch.logspace(-3, 1, shape[0]).unsqueeze(1)
        return values.to(dtype)

    many_blocks = randn(160, 130, dtype=torch.bfloat16, row_scales=True)
    many_blocks.view(-1)[640:704] = 0  # one all-zero block of 64: absmax 0, below the mean
    return [
        ("odd_bf16_64_dq", randn(37, 29, dtype=torch.bfloat16), 64, True),
        ("ties_f32_64", ties_input(), 64, False),
        ("ties_f32_64_dq", ties_input(), 64, True),
        ("f32_128_dq", randn(150, 70, dtype=torch.float32), 128, True),
        ("bf16_64_dq_325_blocks", many_blocks, 64, True),
        ("f16_32_odd", randn(33, 15, dtype=torch.float16), 32, False),
        ("f32_4096_dq", randn(3, 1500, dtype=torch.float32), 4096, True),
        ("zeros_bf16_dq", torch.zeros(10, 7, dtype=torch.bfloat16), 64, True),
        ("bf16_64_dq_rows_of_128", randn(48, 128, dtype=torch.bfloat16), 64, True),
        ("bf16_32_dq_650_blocks", randn(130, 160, dtype=torch.bfloat16, row_scales=True), 32, True),
        ("f32_512_plain", randn(7, 300, dtype=torch.float32), 512, False),
    ]


def flat_dequantize(packed, state, absmax, dtype):
    """bitsandbytes' own flat reference (its default backend), for checking its CPU kernel's answer."""
    code = bnb_functional.get_4bit_type("nf4", device="cpu")
    return _dequantize_4bit_compute(packed.reshape(-1), absmax, code, state.blocksize, state.shape, dtype)


def codec_fixture():
    tensors, listing = {}, []
    for name, values, blocksize, double_quant in cases():
        packed, state = bnb_functional.quantize_4bit(values, blocksize=blocksize, compress_statistics=double_quant,
                                                     quant_type="nf4")
        tensors[f"{name}.input"] = values
        tensors[f"{name}.packed"] = packed.reshape(-1)
        tensors[f"{name}.absmax"] = state.absmax
        if double_quant:
            tensors[f"{name}.nested_absmax"] = state.state2.absmax
            tensors[f"{name}.nested_quant_map"] = state.state2.code
            tensors[f"{name}.offset"] = state.offset.reshape(1)
            absmax = bnb_functional.dequantize_blockwise(state.absmax, state.state2) + state.offset
        else:
            absmax = state.absmax
        # float32 output too where it differs from the input dtype's (the products before rounding)
        outputs = [("dequantized", values.dtype)] + ([("dequantized_f32", torch.float32)]
                                                     if values.dtype != torch.float32 else [])
        for suffix, dtype in outputs:
            target = copy.copy(state)
            target.dtype = dtype
            result = bnb_functional.dequantize_4bit(packed, target)
            if not torch.equal(result, flat_dequantize(packed, state, absmax, dtype)):
                raise SystemExit(f"{name}: bitsandbytes' CPU dequantize_4bit disagrees with its flat reference")
            tensors[f"{name}.{suffix}"] = result
        listing.append({"name": name, "blocksize": blocksize, "double_quant": double_quant})
    safetensors_io.save(os.path.join(OUT, "codec.safetensors"), tensors, {"cases": json.dumps(listing)})


def tiny_llama(layers):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config).to(torch.bfloat16)


def quantised_model_fixture(directory, layers, **bnb_options):
    """A directory as a user's pre-quantised download has it, and bitsandbytes' dequantisation of it."""
    from transformers import BitsAndBytesConfig, LlamaForCausalLM

    target = os.path.join(OUT, directory)
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory() as scratch:
        tiny_llama(layers).save_pretrained(scratch)
        quantisation = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                          bnb_4bit_compute_dtype=torch.bfloat16, **bnb_options)
        model = LlamaForCausalLM.from_pretrained(scratch, quantization_config=quantisation, device_map="cpu",
                                                 dtype=torch.bfloat16)
        model.save_pretrained(target)
    os.remove(os.path.join(target, "generation_config.json"))  # not read by the tests

    # What bitsandbytes itself makes of the saved tensors: QuantState.from_dict, then dequantize_4bit.
    saved = safetensors_io.load(os.path.join(target, "model.safetensors"))
    expected = {}
    for key in sorted(saved):
        if ".quant_state.bitsandbytes__" not in key:
            continue
        weight = key.split(".quant_state.")[0]
        parts = {k[len(weight) + 1:]: v for k, v in saved.items() if k.startswith(weight + ".")}
        state = bnb_functional.QuantState.from_dict(parts, device=torch.device("cpu"))
        expected[weight] = bnb_functional.dequantize_4bit(saved[weight], state)
    safetensors_io.save(os.path.join(target, "expected.safetensors"), expected)
    safetensors_io.save(os.path.join(target, "logits.safetensors"), transformers_logits(target))


def transformers_logits(directory):
    """transformers + bitsandbytes' forward of the pre-quantised directory with fp32 compute, for fixed token ids:
    what tune's forward of the same directory must give (tests/recipes/test_qlora.cpp). The dense tensors load as
    fp32 (exact from bf16), every Linear4bit computes in fp32. In train mode: in eval mode bitsandbytes 0.50.2 repacks
    the weights on AVX512-BF16 CPUs for a bf16 kernel (quant_state.packing_format_for_cpu) whose products differ
    from dequantise-then-linear by ~2e-3; in train mode its gemm_4bit op multiplies the dequantised weight. Llama has
    no dropout, so train mode changes nothing else.

    That op dequantises straight to the compute dtype (code * absmax in float32), not through the dtype the weight
    was quantised from as the public dequantize_4bit does (bf16 here, rounding every weight once more: that moved
    the logits by ~8e-4). `dense_logits` is the same forward in plain transformers with every NF4 weight so
    dequantised, fp32 throughout; the script checks that the two agree, so the reading of bitsandbytes is right."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(directory, device_map="cpu", dtype=torch.float32)
    # A pre-quantised checkpoint keeps its dense tensors in the saved dtype (bf16) whatever `dtype` asks: made fp32
    # here (exactly), as tune holds them.
    for parameter in model.parameters():
        if not isinstance(parameter, bnb.nn.Params4bit) and parameter.is_floating_point():
            parameter.data = parameter.data.float()
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.compute_dtype = torch.float32
    model.train()
    ids = torch.tensor([[1, 5, 9, 20, 33, 47, 60, 2, 11, 95]])
    with torch.no_grad():
        logits = model(ids).logits.float()

    from transformers import LlamaConfig
    config = LlamaConfig.from_pretrained(directory)
    config.quantization_config = None
    dense = LlamaForCausalLM(config).float()
    saved = safetensors_io.load(os.path.join(directory, "model.safetensors"))
    state = dense.state_dict()
    for key in state:
        parts = {k[len(key) + 1:]: v for k, v in saved.items() if k.startswith(key + ".")}
        if any(k.startswith("quant_state.") for k in parts):
            quant_state = bnb_functional.QuantState.from_dict(parts, device=torch.device("cpu"))
            quant_state.dtype = torch.float32  # straight to fp32, as the 4-bit forward dequantises
            state[key] = bnb_functional.dequantize_4bit(saved[key], quant_state)
        else:
            state[key] = saved[key].float()
    dense.load_state_dict(state)
    with torch.no_grad():
        dense_logits = dense(ids).logits.float()
    gap = (logits - dense_logits).abs().max().item()
    if gap > 1e-5:
        raise SystemExit(f"make_nf4_fixture: {directory}: bitsandbytes' 4-bit forward and the dense forward with its "
                         f"weights dequantised to fp32 differ by {gap:.2e}; the reading of its forward is wrong")
    return {"input_ids": ids, "logits": logits.contiguous(), "dense_logits": dense_logits.contiguous()}


def main():
    os.makedirs(OUT, exist_ok=True)
    codec_fixture()
    quantised_model_fixture("model_double_quant", layers=1, bnb_4bit_use_double_quant=True)
    quantised_model_fixture("model_bf16_storage", layers=1, bnb_4bit_use_double_quant=False,
                            bnb_4bit_quant_storage=torch.bfloat16, llm_int8_skip_modules=["lm_head", "down_proj"])
    total = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(OUT) for f in files)
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
