#!/usr/bin/env python3
"""A real-size Latte-1 text-to-video pipeline directory with random weights, for measuring tune at Latte-1's size.

    .venv/bin/python scripts/make_real_size_pipeline.py --out DIR [--seed 0] [--text-encoder-dtype bf16|fp32]
                                                        [--max-shard-size 5GB]
                                                        [--transformer-layers 28] [--text-encoder-layers 24]
                                                        [--width-divisor 1] [--configs-only]

Writes DIR/ laid out as the Hugging Face repository maxin-cn/Latte-1 (diffusers' LattePipeline), with the real
configs and parameter shapes but random weights (no model hub is reachable here):
  model_index.json            LattePipeline: DDIMScheduler, T5EncoderModel, T5Tokenizer, LatteTransformer3DModel,
                              AutoencoderKL
  transformer/                config.json (Latte-1's values: 28 layers, 16 heads of 72, caption_channels 4096,
                              out_channels 8, ada_norm_single, no video_length key, so 16) and
                              diffusion_pytorch_model.safetensors, fp32 as published: 1,057,246,880 parameters,
                              3.94 GiB (one file at the default --max-shard-size, as published; above it
                              diffusion_pytorch_model-0000k-of-0000n.safetensors + .index.json)
  text_encoder/               config.json (T5 v1.1 XXL encoder: d_model 4096, 64 heads of 64, d_ff 10240, 24 layers,
                              gated-gelu, vocab 32128) and model-0000k-of-0000n.safetensors +
                              model.safetensors.index.json (transformers' naming; model.safetensors when one shard
                              holds it all) in --text-encoder-dtype: 4,762,310,656 parameters, 8.87 GiB in bf16 (2
                              shards at 5GB; the default, to save disk and time) or 17.74 GiB in fp32 (4 shards of
                              4.99, 5.00, 4.87 and 4.19 GB: the published files' sizes)
  tokenizer/                  spiece.model, tokenizer_config.json, added_tokens.json, special_tokens_map.json (T5
                              v1.1's layout: <pad> 0, </s> 1, <unk> 2, no BOS, 100 <extra_id_N> sentinels). The real
                              32000-piece spiece.model is not available offline: this is scripts/make_t5_fixture.py's
                              400-piece sentencepiece Unigram model trained on generated captions, so ids run to 499
                              and the embedding keeps T5's 32128 rows (the unused ones are harmless)
  scheduler/scheduler_config.json
                              Latte-1's DDIMScheduler config (linear betas 1e-4..0.02, leading spacing, epsilon,
                              variance_type "learned_range")
  vae/                        config.json and diffusion_pytorch_model.safetensors: the Stable Diffusion AutoencoderKL
                              (block_out_channels 128/256/512/512, 2 layers per block, 4 latent channels, scaling
                              factor 0.18215), fp32: 83,653,863 parameters, 319 MiB

The tensor names, order and shapes are those of the diffusers / transformers classes themselves, built on the meta
device (no memory): LatteTransformer3DModel(**config), AutoencoderKL(**config), T5EncoderModel(T5Config) minus the
tied encoder.embed_tokens.weight, as save_pretrained writes them. Shards are filled greedily in that order, a new
one when the next tensor would pass --max-shard-size (5GB by default, decimal units; the published T5 shards are
~5 GB; diffusers' own default, 10GB, also leaves the transformer in one file). --configs-only writes everything but
the weights (a few MB): enough for `tune plan` (docs/BENCHMARKS.md).

Weights: the transformer's and the VAE's matrices, convolution kernels and biases are normal(0, 0.02); each
scale_shift_table is randn / sqrt(D), as diffusers initialises it; the VAE's GroupNorms are ones (weight) and zeros
(bias). The T5 encoder is transformers' own T5 init (initializer_factor 1): embedding std 1, q (d_model * d_kv)^-1/2
(T5 has no 1/sqrt(d) in attention; it is folded into q), k, v, wi_0, wi_1 and the relative attention bias
d_model^-1/2, o (heads * d_kv)^-1/2, wo d_ff^-1/2, layer norms ones, so the hidden states keep unit scale through
the 24 layers, in bf16 too. Each tensor is drawn in fp32 from its own generator, seeded from (--seed, component,
tensor name), and rounded once to the file's dtype, so the output is deterministic and a tensor does not depend on
the other options (the first layers of a --transformer-layers 2 directory equal the real one's). Sampling stays
finite, but an untrained noise prediction is not the noise: DDIM's x0 estimate amplifies the difference by up to
1/sqrt(alpha_bar) (~128 at t=980), so 50 steps end with latents of std 100 to 300 (the VAE's GroupNorms keep the
decoded video in range).

Every safetensors file is streamed: its header (names, dtypes, shapes, offsets) is written from the shapes first,
then each tensor is drawn, written and freed in turn, so at most one fp32 tensor is in memory (T5's embedding,
32128 x 4096: 0.5 GiB) and the script needs ~1.2 GiB whatever the size. The full directory is 13.1 GiB (14.1 GB)
with the bf16 text encoder, 22.0 GiB with fp32, and takes 2 to 3 minutes on 2 CPU cores (5.9 G parameters drawn and
written at ~60 M/s).

Scale-down options for quick checks (the defaults give the real size): --transformer-layers N and
--text-encoder-layers N cut the depth; --width-divisor K (1, 2, 4, 8 or 16) divides the widths by K, keeping the
head sizes: the transformer's heads (16 -> 16/K, so the inner dim 1152/K = cross_attention_dim) and caption_channels
(4096/K), T5's d_model (4096/K), heads (64/K) and d_ff (10240/K), and the VAE's block_out_channels and
norm_num_groups (32/K).
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_real_size_model import numel, parse_size, plan_shards  # noqa: E402

DIFFUSERS_VERSION = "0.42.1"
MODEL_INDEX = {
    "_class_name": "LattePipeline",
    "_diffusers_version": DIFFUSERS_VERSION,
    "scheduler": ["diffusers", "DDIMScheduler"],
    "text_encoder": ["transformers", "T5EncoderModel"],
    "tokenizer": ["transformers", "T5Tokenizer"],
    "transformer": ["diffusers", "LatteTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}
# maxin-cn/Latte-1 transformer/config.json.
TRANSFORMER_CONFIG = {
    "_class_name": "LatteTransformer3DModel",
    "_diffusers_version": DIFFUSERS_VERSION,
    "activation_fn": "gelu-approximate",
    "attention_bias": True,
    "attention_head_dim": 72,
    "caption_channels": 4096,
    "cross_attention_dim": 1152,
    "dropout": 0.0,
    "in_channels": 4,
    "norm_elementwise_affine": False,
    "norm_eps": 1e-6,
    "norm_type": "ada_norm_single",
    "num_attention_heads": 16,
    "num_embeds_ada_norm": 1000,
    "num_layers": 28,
    "out_channels": 8,
    "patch_size": 2,
    "sample_size": 64,
}
# T5 v1.1 XXL's encoder (PixArt-alpha's t5-v1_1-xxl, Latte-0's and Latte-1's text_encoder/config.json), as an encoder.
TEXT_ENCODER_CONFIG = {
    "architectures": ["T5EncoderModel"],
    "d_ff": 10240,
    "d_kv": 64,
    "d_model": 4096,
    "decoder_start_token_id": 0,
    "dense_act_fn": "gelu_new",
    "dropout_rate": 0.1,
    "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu",
    "initializer_factor": 1.0,
    "is_encoder_decoder": False,
    "is_gated_act": True,
    "layer_norm_epsilon": 1e-6,
    "model_type": "t5",
    "num_heads": 64,
    "num_layers": 24,
    "pad_token_id": 0,
    "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32,
    "tie_word_embeddings": False,
    "transformers_version": "4.45.0",
    "use_cache": False,
    "vocab_size": 32128,
}
# Latte-1's scheduler/scheduler_config.json.
SCHEDULER_CONFIG = {
    "_class_name": "DDIMScheduler",
    "_diffusers_version": DIFFUSERS_VERSION,
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "beta_start": 0.0001,
    "clip_sample": False,
    "num_train_timesteps": 1000,
    "prediction_type": "epsilon",
    "set_alpha_to_one": True,
    "steps_offset": 0,
    "thresholding": False,
    "timestep_spacing": "leading",
    "trained_betas": None,
    "variance_type": "learned_range",
    "clip_sample_range": 1.0,
    "dynamic_thresholding_ratio": 0.995,
    "sample_max_value": 1.0,
    "rescale_betas_zero_snr": False,
}
# The Stable Diffusion VAE (stabilityai/sd-vae-ft-ema's keys).
VAE_CONFIG = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": DIFFUSERS_VERSION,
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 512,
    "scaling_factor": 0.18215,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
}
WIDTH_DIVISORS = (1, 2, 4, 8, 16)  # divide the transformer's 16 heads (and its 1152/K inner dim stays a multiple of 4)
DTYPES = {"bf16": (torch.bfloat16, "BF16", "bfloat16"), "fp32": (torch.float32, "F32", "float32")}


def configs(args):
    """The four model configs at the requested scale (the published ones at the defaults)."""
    k = args.width_divisor
    transformer = dict(TRANSFORMER_CONFIG, num_layers=args.transformer_layers)
    transformer["num_attention_heads"] //= k
    transformer["caption_channels"] //= k
    transformer["cross_attention_dim"] = transformer["num_attention_heads"] * transformer["attention_head_dim"]
    text_encoder = dict(TEXT_ENCODER_CONFIG, num_layers=args.text_encoder_layers,
                        torch_dtype=DTYPES[args.text_encoder_dtype][2])
    for key in ("d_model", "num_heads", "d_ff"):
        text_encoder[key] //= k
    vae = dict(VAE_CONFIG, block_out_channels=[c // k for c in VAE_CONFIG["block_out_channels"]],
               norm_num_groups=VAE_CONFIG["norm_num_groups"] // k)
    return transformer, text_encoder, vae


def meta_models(transformer_config, text_encoder_config, vae_config):
    """The three models on the meta device: their state dicts' names, order and shapes, without memory."""
    from diffusers import AutoencoderKL, LatteTransformer3DModel
    from transformers import T5Config, T5EncoderModel

    def init_args(config):
        return {k: v for k, v in config.items() if not k.startswith("_")}

    t5_config = T5Config(**{k: v for k, v in text_encoder_config.items()
                            if k not in ("architectures", "transformers_version", "torch_dtype")})
    with torch.device("meta"):
        return (LatteTransformer3DModel(**init_args(transformer_config)), T5EncoderModel(t5_config),
                AutoencoderKL(**init_args(vae_config)))


def tensor_specs(model, init, skip=()):
    """[(name, shape, (kind, std))] in state_dict order; init(name, shape, module) gives how it is drawn."""
    modules = dict(model.named_modules())
    specs = []
    for name, tensor in model.state_dict(keep_vars=True).items():
        if name in skip:
            continue
        owner = modules[name.rsplit(".", 1)[0]] if "." in name else model
        specs.append((name, list(tensor.shape), init(name, list(tensor.shape), owner)))
    return specs


def transformer_init(name, shape, module):
    if name.endswith("scale_shift_table"):
        return ("normal", shape[-1] ** -0.5)  # torch.randn(n, D) / D**0.5, as diffusers
    return ("normal", 0.02)


def vae_init(name, shape, module):
    if isinstance(module, torch.nn.GroupNorm):
        return ("ones", None) if name.endswith("weight") else ("zeros", None)
    return ("normal", 0.02)


def t5_init(config):
    """transformers' T5PreTrainedModel._init_weights (initializer_factor 1)."""
    d_model, d_kv, heads, d_ff = config["d_model"], config["d_kv"], config["num_heads"], config["d_ff"]
    std = {"shared.weight": 1.0, "q.weight": (d_model * d_kv) ** -0.5, "k.weight": d_model ** -0.5,
           "v.weight": d_model ** -0.5, "o.weight": (heads * d_kv) ** -0.5,
           "relative_attention_bias.weight": d_model ** -0.5, "wi_0.weight": d_model ** -0.5,
           "wi_1.weight": d_model ** -0.5, "wo.weight": d_ff ** -0.5}

    def init(name, shape, module):
        if name.endswith("layer_norm.weight"):
            return ("ones", None)
        for suffix, value in std.items():
            if name == suffix or name.endswith("." + suffix):
                return ("normal", value)
        raise SystemExit(f"make_real_size_pipeline: no T5 init for {name}; transformers' T5 has changed")
    return init


def tensor_seed(seed, component, name):
    digest = hashlib.sha256(f"{seed}/{component}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def draw(seed, component, name, shape, how, dtype):
    kind, std = how
    if kind == "ones":
        return torch.ones(shape, dtype=dtype)
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype)
    generator = torch.Generator().manual_seed(tensor_seed(seed, component, name))
    tensor = torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=generator)
    return tensor if dtype == torch.float32 else tensor.to(dtype)  # drawn in fp32, rounded once


def write_safetensors(path, specs, make, dtype_name, element_size):
    """Streams one safetensors file: the header from the shapes, then each tensor made, written and freed in turn.
    specs: [(name, shape, how)]; make(name, shape, how) -> tensor of the file's dtype. Returns the data bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in specs:
        size = numel(shape) * element_size
        header[name] = {"dtype": dtype_name, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # 8-byte aligned data section
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, how in specs:
            tensor = make(name, shape, how).contiguous()
            if tensor.dtype == torch.bfloat16:
                tensor = tensor.view(torch.int16)  # numpy has no bfloat16: the raw bits
            data = tensor.numpy()
            if data.nbytes != numel(shape) * element_size:
                raise SystemExit(f"make_real_size_pipeline: {name}: {data.nbytes} bytes, header says "
                                 f"{numel(shape) * element_size}")
            f.write(memoryview(data).cast("B"))
            del tensor, data
    os.replace(tmp, path)
    return offset


def write_weights(directory, stem, specs, seed, component, dtype_key, max_bytes, start):
    """save_pretrained's layout: STEM.safetensors, or STEM-0000k-of-0000n.safetensors + STEM.safetensors.index.json
    when the tensors pass max_bytes. Returns the data bytes."""
    dtype, dtype_name, _ = DTYPES[dtype_key]
    element_size = torch.tensor([], dtype=dtype).element_size()
    shards = plan_shards([(name, shape) for name, shape, _ in specs], max_bytes, element_size)
    how = {name: h for name, _, h in specs}
    make = lambda name, shape, h: draw(seed, component, name, shape, h, dtype)  # noqa: E731
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        file = f"{stem}.safetensors" if len(shards) == 1 else f"{stem}-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_safetensors(os.path.join(directory, file), [(n, s, how[n]) for n, s in tensors], make,
                                   dtype_name, element_size)
        weight_map.update({name: file for name, _ in tensors})
        print(f"{component}/{file}: {len(tensors)} tensors ({time.time() - start:.0f} s)", flush=True)
    if len(shards) > 1:
        with open(os.path.join(directory, f"{stem}.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return total


def write_json(path, value):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


def write_tokenizer(directory):
    """scripts/make_t5_fixture.py's sentencepiece Unigram model and T5 v1.1 tokenizer files, plus
    special_tokens_map.json."""
    import sentencepiece as spm

    import make_t5_fixture
    with tempfile.TemporaryDirectory() as work_dir:
        spiece = make_t5_fixture.train_spiece(work_dir)
        pieces = spm.SentencePieceProcessor(model_file=spiece).get_piece_size()
        make_t5_fixture.write_t5_v11_style_tokenizer(directory, spiece, pieces)
    with open(os.path.join(directory, "tokenizer_config.json")) as f:
        sentinels = json.load(f)["additional_special_tokens"]
    write_json(os.path.join(directory, "special_tokens_map.json"),
               {"additional_special_tokens": sentinels, "eos_token": "</s>", "pad_token": "<pad>",
                "unk_token": "<unk>"})
    return pieces, len(sentinels)


def directory_bytes(directory):
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(directory) for name in names)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the pipeline directory to write (created; must be empty or "
                                                     "absent)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--text-encoder-dtype", default="bf16", choices=sorted(DTYPES),
                        help="the T5 encoder's weights (bf16; the published ones are fp32)")
    parser.add_argument("--max-shard-size", default="5GB", help="per safetensors file, as save_pretrained's "
                                                                "max_shard_size (5GB)")
    parser.add_argument("--transformer-layers", type=int, default=TRANSFORMER_CONFIG["num_layers"])
    parser.add_argument("--text-encoder-layers", type=int, default=TEXT_ENCODER_CONFIG["num_layers"])
    parser.add_argument("--width-divisor", type=int, default=1, choices=WIDTH_DIVISORS,
                        help="divide the widths by K, keeping the head sizes (quick checks)")
    parser.add_argument("--configs-only", action="store_true",
                        help="write the configs, tokenizer and scheduler but no weights: enough for `tune plan`")
    args = parser.parse_args()
    if args.transformer_layers < 1 or args.text_encoder_layers < 1:
        sys.exit("--transformer-layers and --text-encoder-layers must be >= 1")
    if os.path.isdir(args.out) and os.listdir(args.out):
        sys.exit(f"{args.out}: exists and is not empty; remove it or choose another directory")
    max_bytes = parse_size(args.max_shard_size)

    transformer_config, text_encoder_config, vae_config = configs(args)
    transformer, text_encoder, vae = meta_models(transformer_config, text_encoder_config, vae_config)
    tied = set(getattr(text_encoder, "_tied_weights_keys", None) or {"encoder.embed_tokens.weight": None})
    components = [
        ("transformer", "diffusion_pytorch_model", tensor_specs(transformer, transformer_init), "fp32",
         transformer_config, "config.json"),
        ("text_encoder", "model", tensor_specs(text_encoder, t5_init(text_encoder_config), skip=tied),
         args.text_encoder_dtype, text_encoder_config, "config.json"),
        ("vae", "diffusion_pytorch_model", tensor_specs(vae, vae_init), "fp32", vae_config, "config.json"),
    ]
    del transformer, text_encoder, vae

    start = time.time()
    os.makedirs(args.out, exist_ok=True)
    write_json(os.path.join(args.out, "model_index.json"), MODEL_INDEX)
    write_json(os.path.join(args.out, "scheduler", "scheduler_config.json"), SCHEDULER_CONFIG)
    pieces, sentinels = write_tokenizer(os.path.join(args.out, "tokenizer"))
    summary = []
    for component, stem, specs, dtype_key, config, config_name in components:
        directory = os.path.join(args.out, component)
        write_json(os.path.join(directory, config_name), config)
        if not args.configs_only:
            write_weights(directory, stem, specs, args.seed, component, dtype_key, max_bytes, start)
        summary.append((component, sum(numel(shape) for _, shape, _ in specs), dtype_key,
                        directory_bytes(directory)))

    print(f"{args.out}: Latte-1-shaped LattePipeline with "
          f"{'configs only, no weights' if args.configs_only else 'random weights'} (seed {args.seed}, "
          f"{time.time() - start:.0f} s)")
    for component, params, dtype_key, size in summary:
        print(f"  {component:<13} {params:>15,} parameters  {dtype_key:<5} {size:>17,} bytes ({size / 2**30:.2f} GiB)")
    print(f"  {'tokenizer':<13} {pieces} sentencepiece pieces + {sentinels} sentinels "
          f"({directory_bytes(os.path.join(args.out, 'tokenizer')):,} bytes)")
    total = directory_bytes(args.out)
    print(f"  {'total':<13} {sum(p for _, p, _, _ in summary):>15,} parameters        "
          f"{total:>17,} bytes ({total / 2**30:.2f} GiB)")


if __name__ == "__main__":
    main()
