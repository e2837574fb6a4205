#!/usr/bin/env python3
"""Reference tensors for tune's AutoencoderKL (tests/models/test_vae.cpp).

An independent float64 implementation of the forward pass of diffusers' AutoencoderKL (the Stable Diffusion VAE),
written with torch.nn.functional from the architecture's description, not from tune's C++ and not by importing
diffusers:
  ResnetBlock2D      x + conv2(silu(gn2(conv1(silu(gn1(x))))))  (1x1 conv on the skip when channels change)
  Downsample2D       pad right and bottom by one, 3x3 conv with stride 2, no padding
  Upsample2D         nearest-neighbour 2x, 3x3 conv
  mid-block attention  single head over the H*W positions: group norm, q/k/v linear, softmax(q k^T / sqrt(C)) v,
                     output linear, residual
  encoder            conv_in, down blocks (layers_per_block resnets, a downsampler except the last), mid block
                     (resnet, attention, resnet), group norm, silu, conv_out to 2 * latent_channels
  AutoencoderKL      quant_conv -> mean, logvar (clamped to [-30, 20]); decode: post_quant_conv, decoder (conv_in,
                     mid block, up blocks of layers_per_block + 1 resnets with an upsampler except the last, group
                     norm, silu, conv_out)
Group norms use eps 1e-6. Weights are drawn in float64, rounded to float32 (the file's dtype), and the reference
runs in float64 on the rounded values, so tune's fp32 model sees exactly the weights the reference used.

Writes tests/fixtures/vae/:
  config.json                            a diffusers AutoencoderKL config (tiny)
  diffusion_pytorch_model.safetensors    F32 weights under diffusers' tensor names (modern to_q/to_k/to_v/to_out.0)
  io.safetensors                         images [2, 3, 16, 16] in [-1, 1]; encoder_mean, encoder_logvar
                                         [2, 4, 8, 8] (after quant_conv and the clamp); latents [2, 4, 8, 8] (scaled,
                                         i.e. what a diffusion model sees) and decoded [2, 3, 16, 16] =
                                         decoder(post_quant_conv(latents / scaling_factor)), all F32.

Run: .venv/bin/python scripts/make_vae_fixture.py   (deterministic; needs only torch)
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "vae")

CONFIG = {
    "_class_name": "AutoencoderKL",
    "_diffusers_version": "0.30.0",
    "act_fn": "silu",
    "block_out_channels": [8, 16],
    "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"],
    "force_upcast": True,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "out_channels": 3,
    "sample_size": 16,
    "scaling_factor": 0.18215,
    "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"],
}
EPS = 1e-6
LOGVAR_CLAMPED_CHANNEL = 3  # its quant_conv bias is pushed past 20 so the clamp is exercised


class Weights:
    """Draws named tensors in float64, rounded through float32, and remembers them in creation order."""

    def __init__(self, seed):
        self.generator = torch.Generator().manual_seed(seed)
        self.tensors = {}

    def _add(self, name, value):
        value = value.to(torch.float32).to(torch.float64)
        self.tensors[name] = value
        return value

    def conv(self, name, cin, cout, k):
        fan_in = cin * k * k
        self._add(name + ".weight", torch.randn(cout, cin, k, k, generator=self.generator, dtype=torch.float64)
                  / fan_in ** 0.5)
        self._add(name + ".bias", 0.1 * torch.randn(cout, generator=self.generator, dtype=torch.float64))

    def linear(self, name, cin, cout, gain=1.0):
        self._add(name + ".weight", gain * torch.randn(cout, cin, generator=self.generator, dtype=torch.float64)
                  / cin ** 0.5)
        self._add(name + ".bias", 0.1 * torch.randn(cout, generator=self.generator, dtype=torch.float64))

    def norm(self, name, channels):
        self._add(name + ".weight", 1 + 0.2 * torch.randn(channels, generator=self.generator, dtype=torch.float64))
        self._add(name + ".bias", 0.1 * torch.randn(channels, generator=self.generator, dtype=torch.float64))


def make_weights(cfg):
    w = Weights(seed=1234)
    channels = cfg["block_out_channels"]
    layers = cfg["layers_per_block"]
    latent = cfg["latent_channels"]

    def resnet(name, cin, cout):
        w.norm(name + ".norm1", cin)
        w.conv(name + ".conv1", cin, cout, 3)
        w.norm(name + ".norm2", cout)
        w.conv(name + ".conv2", cout, cout, 3)
        if cin != cout:
            w.conv(name + ".conv_shortcut", cin, cout, 1)

    def mid(name, c):
        resnet(name + ".resnets.0", c, c)
        w.norm(name + ".attentions.0.group_norm", c)
        # q and k scaled up so the softmax is far from uniform.
        w.linear(name + ".attentions.0.to_q", c, c, gain=2.0)
        w.linear(name + ".attentions.0.to_k", c, c, gain=2.0)
        w.linear(name + ".attentions.0.to_v", c, c)
        w.linear(name + ".attentions.0.to_out.0", c, c)
        resnet(name + ".resnets.1", c, c)

    # encoder
    w.conv("encoder.conv_in", cfg["in_channels"], channels[0], 3)
    out_c = channels[0]
    for i in range(len(channels)):
        in_c, out_c = out_c, channels[i]
        for j in range(layers):
            resnet(f"encoder.down_blocks.{i}.resnets.{j}", in_c if j == 0 else out_c, out_c)
        if i != len(channels) - 1:
            w.conv(f"encoder.down_blocks.{i}.downsamplers.0.conv", out_c, out_c, 3)
    mid("encoder.mid_block", channels[-1])
    w.norm("encoder.conv_norm_out", channels[-1])
    w.conv("encoder.conv_out", channels[-1], 2 * latent, 3)
    w.conv("quant_conv", 2 * latent, 2 * latent, 1)
    bias = w.tensors["quant_conv.bias"].clone()
    bias[latent + LOGVAR_CLAMPED_CHANNEL] += 25.0
    w.tensors["quant_conv.bias"] = bias.to(torch.float32).to(torch.float64)
    # post-quant + decoder
    w.conv("post_quant_conv", latent, latent, 1)
    w.conv("decoder.conv_in", latent, channels[-1], 3)
    mid("decoder.mid_block", channels[-1])
    reversed_channels = list(reversed(channels))
    out_c = reversed_channels[0]
    for i in range(len(reversed_channels)):
        in_c, out_c = out_c, reversed_channels[i]
        for j in range(layers + 1):
            resnet(f"decoder.up_blocks.{i}.resnets.{j}", in_c if j == 0 else out_c, out_c)
        if i != len(reversed_channels) - 1:
            w.conv(f"decoder.up_blocks.{i}.upsamplers.0.conv", out_c, out_c, 3)
    w.norm("decoder.conv_norm_out", channels[0])
    w.conv("decoder.conv_out", channels[0], cfg["out_channels"], 3)
    return w.tensors


# ---- the reference forward (float64) ----

def conv(t, x, name, stride=1, padding=None):
    weight = t[name + ".weight"]
    if padding is None:
        padding = weight.shape[-1] // 2
    return F.conv2d(x, weight, t[name + ".bias"], stride=stride, padding=padding)


def group_norm(t, x, name, groups):
    return F.group_norm(x, groups, t[name + ".weight"], t[name + ".bias"], eps=EPS)


def resnet(t, x, name, groups):
    h = conv(t, F.silu(group_norm(t, x, name + ".norm1", groups)), name + ".conv1")
    h = conv(t, F.silu(group_norm(t, h, name + ".norm2", groups)), name + ".conv2")
    skip = conv(t, x, name + ".conv_shortcut") if name + ".conv_shortcut.weight" in t else x
    return skip + h


def attention(t, x, name, groups):
    n, c, height, width = x.shape
    h = group_norm(t, x, name + ".group_norm", groups).reshape(n, c, height * width).transpose(1, 2)  # [N, HW, C]
    q = h @ t[name + ".to_q.weight"].T + t[name + ".to_q.bias"]
    k = h @ t[name + ".to_k.weight"].T + t[name + ".to_k.bias"]
    v = h @ t[name + ".to_v.weight"].T + t[name + ".to_v.bias"]
    weights = torch.softmax(q @ k.transpose(1, 2) / c ** 0.5, dim=-1)  # one head of width C
    out = (weights @ v) @ t[name + ".to_out.0.weight"].T + t[name + ".to_out.0.bias"]
    return x + out.transpose(1, 2).reshape(n, c, height, width)


def mid_block(t, x, name, groups):
    x = resnet(t, x, name + ".resnets.0", groups)
    x = attention(t, x, name + ".attentions.0", groups)
    return resnet(t, x, name + ".resnets.1", groups)


def encode(t, cfg, images):
    groups, layers, channels = cfg["norm_num_groups"], cfg["layers_per_block"], cfg["block_out_channels"]
    x = conv(t, images, "encoder.conv_in")
    for i in range(len(channels)):
        for j in range(layers):
            x = resnet(t, x, f"encoder.down_blocks.{i}.resnets.{j}", groups)
        if i != len(channels) - 1:
            x = conv(t, F.pad(x, (0, 1, 0, 1)), f"encoder.down_blocks.{i}.downsamplers.0.conv", stride=2, padding=0)
    x = mid_block(t, x, "encoder.mid_block", groups)
    x = conv(t, F.silu(group_norm(t, x, "encoder.conv_norm_out", groups)), "encoder.conv_out")
    moments = conv(t, x, "quant_conv")
    latent = cfg["latent_channels"]
    return moments[:, :latent], moments[:, latent:].clamp(-30.0, 20.0)


def decode(t, cfg, z):
    groups, layers, channels = cfg["norm_num_groups"], cfg["layers_per_block"], cfg["block_out_channels"]
    x = conv(t, conv(t, z, "post_quant_conv"), "decoder.conv_in")
    x = mid_block(t, x, "decoder.mid_block", groups)
    for i in range(len(channels)):
        for j in range(layers + 1):
            x = resnet(t, x, f"decoder.up_blocks.{i}.resnets.{j}", groups)
        if i != len(channels) - 1:
            x = conv(t, F.interpolate(x, scale_factor=2.0, mode="nearest"), f"decoder.up_blocks.{i}.upsamplers.0.conv")
    return conv(t, F.silu(group_norm(t, x, "decoder.conv_norm_out", groups)), "decoder.conv_out")


def main():
    os.makedirs(OUT, exist_ok=True)
    cfg = CONFIG
    tensors = make_weights(cfg)
    generator = torch.Generator().manual_seed(99)
    size = cfg["sample_size"]
    images = (torch.rand(2, cfg["in_channels"], size, size, generator=generator, dtype=torch.float64) * 2 - 1)
    images = images.to(torch.float32).to(torch.float64)
    latent_size = size // 2 ** (len(cfg["block_out_channels"]) - 1)
    latents = torch.randn(2, cfg["latent_channels"], latent_size, latent_size, generator=generator,
                          dtype=torch.float64).to(torch.float32).to(torch.float64)
    with torch.no_grad():
        mean, logvar = encode(tensors, cfg, images)
        decoded = decode(tensors, cfg, latents / cfg["scaling_factor"])
    clamped = (logvar[:, LOGVAR_CLAMPED_CHANNEL] == 20.0).double().mean().item()
    print(f"mean |mean| {mean.abs().mean():.3f}, logvar range [{logvar.min():.2f}, {logvar.max():.2f}], "
          f"clamped fraction of channel {LOGVAR_CLAMPED_CHANNEL}: {clamped:.2f}, decoded std {decoded.std():.3f}")

    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    safetensors_io.save(os.path.join(OUT, "diffusion_pytorch_model.safetensors"),
                        {name: value.to(torch.float32) for name, value in tensors.items()}, {"format": "pt"})
    safetensors_io.save(os.path.join(OUT, "io.safetensors"), {
        "images": images.to(torch.float32),
        "encoder_mean": mean.to(torch.float32),
        "encoder_logvar": logvar.to(torch.float32),
        "latents": latents.to(torch.float32),
        "decoded": decoded.to(torch.float32),
    })
    total = sum(os.path.getsize(os.path.join(OUT, name)) for name in os.listdir(OUT))
    print(f"wrote {len(tensors)} weight tensors to {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
