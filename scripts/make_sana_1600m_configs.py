#!/usr/bin/env python3
"""The configuration files of Sana_1600M_1024px_diffusers (NVlabs' published SanaPipeline), without weights: enough
for `tune plan` (which reads the configs and counts parameters by building one block) to plan Sana-1600M at its real
size without downloading 7 GB (no model hub is reachable here).

    .venv/bin/python scripts/make_sana_1600m_configs.py --out DIR

Writes DIR/model_index.json (SanaPipeline) and the config.json of each component, as diffusers' save_config writes
them, from the classes themselves built on the meta device (no memory):
  transformer/   SanaTransformer2DModel: 20 blocks, 70 heads x 32 (hidden 2240), cross-attention 20 x 112, caption
                 2304 (Gemma 2), mlp_ratio 2.5, patch 1, 32 latent channels, sample_size 32 (1024 px)
  vae/           AutoencoderDC as dc-ae-f32c32-sana-1.0 (32 latent channels, 32x spatial compression, scaling_factor
                 0.41407)
  text_encoder/  Gemma2Model config of gemma-2-2b-it (hidden 2304, 26 layers)
  tokenizer/     tokenizer_config.json only (GemmaTokenizerFast; no vocabulary: tune plan never tokenizes)
  scheduler/     DPMSolverMultistepScheduler with flow sigmas, flow_shift 3.0 (the published scheduler config)
The values are those of docs in ../shared/research/latte1_sana.md (the Efficient-Large-Model repositories).
"""
import argparse
import json
import os

import torch
from diffusers import AutoencoderDC, DPMSolverMultistepScheduler, SanaTransformer2DModel
from transformers import Gemma2Config


SANA_1600M = dict(in_channels=32, out_channels=32, num_attention_heads=70, attention_head_dim=32, num_layers=20,
                  num_cross_attention_heads=20, cross_attention_head_dim=112, cross_attention_dim=2240,
                  caption_channels=2304, mlp_ratio=2.5, sample_size=32, patch_size=1)


def write_pipeline_configs(out, transformer_config=SANA_1600M):
    """Every component's config (no weights); `transformer_config`: SanaTransformer2DModel's arguments."""
    with torch.device("meta"):
        transformer = SanaTransformer2DModel(**transformer_config)
        blocks = ("ResBlock",) * 3 + ("EfficientViTBlock",) * 3
        vae = AutoencoderDC(  # dc-ae-f32c32-sana-1.0, as diffusers' conversion script configures it
            in_channels=3, latent_channels=32, attention_head_dim=32, encoder_block_types=blocks,
            decoder_block_types=blocks, encoder_block_out_channels=(128, 256, 512, 512, 1024, 1024),
            decoder_block_out_channels=(128, 256, 512, 512, 1024, 1024), encoder_layers_per_block=(2, 2, 2, 3, 3, 3),
            decoder_layers_per_block=(3, 3, 3, 3, 3, 3), encoder_qkv_multiscales=((), (), (), (5,), (5,), (5,)),
            decoder_qkv_multiscales=((), (), (), (5,), (5,), (5,)), upsample_block_type="interpolate",
            downsample_block_type="Conv", decoder_norm_types="rms_norm", decoder_act_fns="silu",
            scaling_factor=0.41407)
    transformer.save_config(os.path.join(out, "transformer"))
    vae.save_config(os.path.join(out, "vae"))
    Gemma2Config(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                 num_attention_heads=8, num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256,
                 sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                 architectures=["Gemma2Model"]).save_pretrained(os.path.join(out, "text_encoder"))
    os.makedirs(os.path.join(out, "tokenizer"), exist_ok=True)
    with open(os.path.join(out, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizer", "padding_side": "right"}, f, indent=2)
    DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", solver_order=2, solver_type="midpoint",
                                prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                                final_sigmas_type="zero", lower_order_final=True,
                                timestep_spacing="linspace").save_config(os.path.join(out, "scheduler"))
    index = {"_class_name": "SanaPipeline", "_diffusers_version": "0.42.1",
             "transformer": ["diffusers", "SanaTransformer2DModel"], "vae": ["diffusers", "AutoencoderDC"],
             "text_encoder": ["transformers", "Gemma2Model"], "tokenizer": ["transformers", "GemmaTokenizerFast"],
             "scheduler": ["diffusers", "DPMSolverMultistepScheduler"]}
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    write_pipeline_configs(args.out)
    print(f"make_sana_1600m_configs: Sana_1600M_1024px's configs (no weights) in {args.out}")


if __name__ == "__main__":
    main()
