"""Writes the safetensors fixtures read by tests/io (run with a Python that has torch: .venv/bin/python).

The files come from scripts/safetensors_io.py, a writer independent of the C++ one, so the C++ reader is checked
against an outside truth. Every value is a torch.arange formula that tests/io/test_safetensors.cpp and
test_weights.cpp recompute, and every value is exact in its dtype, so the tests compare with torch::equal.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "io")


def mixed_dtypes():
    """One file with a tensor of each common dtype, plus a scalar and metadata."""
    return {
        "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.5 - 1,
        "f16": (torch.arange(6, dtype=torch.float32) * 0.25).to(torch.float16).reshape(2, 3),
        "bf16": ((torch.arange(8, dtype=torch.float32) - 4) * 0.125).to(torch.bfloat16),
        # beyond int32, to catch a reader that narrows
        "i64": torch.arange(5, dtype=torch.int64) * (1 << 40) - 3,
        "scalar": torch.tensor(3.25, dtype=torch.float32),
    }


def sequential_weights():
    """Weights for torch::nn::Sequential(Linear(3, 4), Linear(4, 2)); the second layer in BF16, as many
    checkpoints on the hub are, so loading it into an F32 model exercises the conversion."""
    return {
        "0.weight": torch.arange(12, dtype=torch.float32).reshape(4, 3) / 8,
        "0.bias": torch.arange(4, dtype=torch.float32) / 8 - 1,
    }, {
        "1.weight": (torch.arange(8, dtype=torch.float32).reshape(2, 4) / 8 - 0.5).to(torch.bfloat16),
        "1.bias": (torch.arange(2, dtype=torch.float32) / 8 + 2).to(torch.bfloat16),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    safetensors_io.save(os.path.join(OUT, "mixed.safetensors"), mixed_dtypes(), metadata={"format": "pt"})

    sharded = os.path.join(OUT, "sharded")
    os.makedirs(sharded, exist_ok=True)
    weight_map, total = {}, 0
    for i, shard in enumerate(sequential_weights(), start=1):
        name = f"model-{i:05d}-of-00002.safetensors"
        safetensors_io.save(os.path.join(sharded, name), shard, metadata={"format": "pt"})
        for tensor_name, tensor in shard.items():
            weight_map[tensor_name] = name
            total += tensor.numel() * tensor.element_size()
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")

    # Round-trip check through the independent reader, so a broken writer cannot produce a passing fixture.
    loaded = safetensors_io.load(os.path.join(OUT, "mixed.safetensors"))
    for name, tensor in mixed_dtypes().items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor), name


if __name__ == "__main__":
    main()
