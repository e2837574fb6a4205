#!/usr/bin/env python3
"""Reference outputs for tune's AutoencoderDC (src/tune/models/dc_ae.h) from Hugging Face diffusers' AutoencoderDC,
the DC-AE that Sana ships as its VAE (read by tests/models/test_dc_ae.cpp).

    .venv/bin/python scripts/make_diffusers_dcae_fixture.py --out DIR     (deterministic; run by CTest)

Two tiny seeded models, 3 stages of [8, 16, 32] channels (compression 4), ResBlock in stage 0 and EfficientViT
blocks with multi-scale (5x5) linear attention of head_dim 8 in stages 1-2, every parameter randomised (norm
weights around 1, biases of a size that matters), saved with save_pretrained under diffusers' names:
  sana_like:  Sana's choices: downsample "Conv", upsample "interpolate", shortcuts on, decoder_conv_act_fn relu,
              scaling_factor 0.41407; one diffusion_pytorch_model.safetensors
  variant:    downsample "pixel_unshuffle", upsample "pixel_shuffle", both shortcuts off, per-stage decoder_act_fns
              ["gelu", "silu", "silu"], decoder_conv_act_fn "silu", layers [1, 2, 1]; saved in shards (an index)
DIR/<model>/config.json and weights, and DIR/<model>.safetensors with, per model:
  image [2, 3, 32, 24] in [-1, 1]; encoded: diffusers' encode(image).latent, fp32
  z [2, 8, 8, 6] ~ N(0, 1); decoded: diffusers' decode(z).sample, fp32
  small_image [1, 3, 8, 8], small_encoded; small_z [1, 8, 2, 2], small_decoded: the deepest stage is 2x2 = 4 <=
      head_dim tokens, where diffusers takes its "quadratic" attention branch
and for sana_like only, diffusers' tiled encode and decode (enable_tiling(16, 16, 12, 12): image tiles of 16 every
12 pixels, latent tiles of 4 every 3; a 4-pixel / 1-latent blend), tile_image [1, 3, 40, 36] -> tiled_encoded
[1, 8, 10, 9] and tile_z [1, 8, 10, 9] -> tiled_decoded [1, 3, 40, 36]. All fp32: no float64 reference, since
diffusers computes the linear attention and the RMSNorm statistics in fp32 even in a float64 model.
If torch or diffusers is not installed, writes DIR/SKIPPED with the reason instead and exits 0; the test then exits
77 (reported skipped by CTest, never passed).
"""
import math
import os
import sys

try:
    import torch
except ImportError:  # reported as SKIPPED by main(), like a missing diffusers
    torch = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_output  # noqa: E402

COMMON = dict(in_channels=3, latent_channels=8, attention_head_dim=8,
              encoder_block_types=["ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
              decoder_block_types=["ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
              encoder_block_out_channels=[8, 16, 32], decoder_block_out_channels=[8, 16, 32],
              encoder_qkv_multiscales=[[], [5], [5]], decoder_qkv_multiscales=[[], [5], [5]])
MODELS = {
    "sana_like": dict(COMMON, encoder_layers_per_block=[1, 1, 2], decoder_layers_per_block=[2, 1, 2],
                      downsample_block_type="Conv", upsample_block_type="interpolate", decoder_norm_types="rms_norm",
                      decoder_act_fns="silu", scaling_factor=0.41407),
    "variant": dict(COMMON, encoder_layers_per_block=[1, 2, 1], decoder_layers_per_block=[1, 2, 1],
                    downsample_block_type="pixel_unshuffle", upsample_block_type="pixel_shuffle",
                    decoder_norm_types=["rms_norm"] * 3, decoder_act_fns=["gelu", "silu", "silu"],
                    encoder_out_shortcut=False, decoder_in_shortcut=False, decoder_conv_act_fn="silu",
                    scaling_factor=1.5),
}


def randomise(model, seed):
    """Every tensor random and of a size that matters: norm weights around 1, biases +-0.2, weights ~ 1/sqrt(fan_in)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if p.dim() == 1 and name.endswith("weight"):
                p.copy_(1.0 + 0.3 * noise)
            elif name.endswith("bias"):
                p.copy_(0.2 * noise)
            else:
                p.copy_(noise / math.sqrt(p[0].numel()))


def run(model, inputs):
    with torch.no_grad():
        return {
            "encoded": model.encode(inputs["image"]).latent,
            "decoded": model.decode(inputs["z"]).sample,
            "small_encoded": model.encode(inputs["small_image"]).latent,
            "small_decoded": model.decode(inputs["small_z"]).sample,
        }


def run_tiled(model, inputs):
    model.enable_tiling(tile_sample_min_height=16, tile_sample_min_width=16, tile_sample_stride_height=12,
                        tile_sample_stride_width=12)
    with torch.no_grad():
        encoded = model.encode(inputs["tile_image"]).latent
        decoded = model.decode(inputs["tile_z"]).sample
    model.disable_tiling()
    return {"tiled_encoded": encoded, "tiled_decoded": decoded}


def main():
    out = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    if fixture_output.skipped_without(out, "make_diffusers_dcae_fixture", "torch", "diffusers"):
        return
    from diffusers import AutoencoderDC

    import safetensors_io
    torch.set_num_threads(1)
    for index, (name, config) in enumerate(MODELS.items()):
        torch.manual_seed(index)
        model = AutoencoderDC(**config).eval()
        randomise(model, 20250601 + index)
        shard = "20KB" if name == "variant" else "10GB"
        model.save_pretrained(os.path.join(out, name), safe_serialization=True, max_shard_size=shard)
        generator = torch.Generator().manual_seed(100 + index)
        inputs = {
            "image": torch.rand(2, 3, 32, 24, generator=generator) * 2 - 1,
            "z": torch.randn(2, 8, 8, 6, generator=generator),
            "small_image": torch.rand(1, 3, 8, 8, generator=generator) * 2 - 1,
            "small_z": torch.randn(1, 8, 2, 2, generator=generator),
        }
        if name == "sana_like":
            inputs["tile_z"] = torch.randn(1, 8, 10, 9, generator=generator)
            inputs["tile_image"] = torch.rand(1, 3, 40, 36, generator=generator) * 2 - 1
        tensors = dict(inputs)
        tensors.update(run(model, inputs))
        if name == "sana_like":
            tensors.update(run_tiled(model, inputs))
        safetensors_io.save(os.path.join(out, name + ".safetensors"), tensors)
    print(f"make_diffusers_dcae_fixture: wrote {out}")


if __name__ == "__main__":
    main()
