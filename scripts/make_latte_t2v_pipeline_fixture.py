#!/usr/bin/env python3
"""A tiny Latte-1-shaped diffusers pipeline directory and diffusers' own samples from it, for tune's end-to-end
text-to-video test (tests/cli/latte_t2v_tests.sh).

    .venv/bin/python scripts/make_latte_t2v_pipeline_fixture.py --out DIR     (deterministic; run by CTest)

Builds with diffusers and transformers, all seeded and random (nothing zero-initialised is left at zero, so every
weight matters): a T5 v1.1 encoder (gated-gelu) with scripts/make_t5_fixture.py's sentencepiece Unigram
spiece.model trained on the spot on captions (T5's conventions: pad 0, </s> 1, <unk> 2, 100 sentinels), an AutoencoderKL (factor 2), a
LatteTransformer3DModel (learned sigma: out_channels 8) and Latte-1's DDIMScheduler config; saves them as a
LattePipeline directory (DIR/pipeline) laid out as Latte-1's: tokenizer/ holds spiece.model (no tokenizer.json)
and scheduler_config.json gets the extra key "variance_type": "learned_range". Then runs diffusers' LattePipeline on it in float32 and writes DIR/expected/:
  noise.safetensors         "latents" [1, 4, F, h, w]: the initial latents (what tune infer --noise takes)
  one_prompt.safetensors    "latents" (output_type="latent") and "video" (output_type="pt", diffusers' [0, 1]
                            frames [F, 3, H, W]) for one prompt with classifier-free guidance (mask_feature: the
                            embeddings cut to the prompt's tokens)
  seeded.safetensors        "latents" for the same prompt from torch.Generator().manual_seed(SEED) noise
  two_prompts.safetensors   "latents" [2, 4, F, h, w] for two prompts (padded rows zeroed) from "noise2"
  no_cfg.safetensors        "latents" at guidance_scale 1 (no guidance)
  settings.json             prompts, negative prompt, steps, cfg scale, frames, height, width, seed
The pipeline is built with a scheduler object whose config has no variance_type, so diffusers drops the
learned-sigma channels before each DDIM step, as Vchitect/Latte's own pipeline always does (with Latte-1's
published config diffusers would hand all 8 channels to the scheduler; tune follows the official rule).
Without diffusers, transformers or sentencepiece, writes DIR/SKIPPED with the reason and exits 0.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_output  # noqa: E402

FRAMES, HEIGHT, WIDTH, STEPS, CFG, SEED = 4, 16, 16, 5, 7.5, 1234
PROMPT = "  A Red Square moving LEFT across a blue field  "
PROMPTS2 = ["a green circle moving up", "a yellow triangle moving right slowly over a black background"]
NEGATIVE = ""

def randomise(module, generator, scale=0.2):
    import torch
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * scale)


def build_pipeline(workdir):
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, LattePipeline, LatteTransformer3DModel
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    import sentencepiece as spm
    import make_t5_fixture as t5_fixture
    generator = torch.Generator().manual_seed(20261126)
    # The tokenizer directory as Latte-1 ships it (spiece.model, tokenizer_config.json, added_tokens.json), from
    # the T5 fixture's sentencepiece Unigram model; T5Tokenizer(vocab_file=...) alone would build a placeholder.
    spiece = t5_fixture.train_spiece(workdir)
    pieces = spm.SentencePieceProcessor(model_file=spiece).get_piece_size()
    tokenizer_dir = os.path.join(workdir, "tokenizer")
    t5_fixture.write_t5_v11_style_tokenizer(tokenizer_dir, spiece, pieces)
    tokenizer = T5Tokenizer.from_pretrained(tokenizer_dir)
    t5 = T5EncoderModel(T5Config(vocab_size=len(tokenizer) + 4, d_model=32, d_kv=8, d_ff=48, num_layers=2,
                                 num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                                 feed_forward_proj="gated-gelu", dropout_rate=0.0, is_encoder_decoder=False,
                                 use_cache=False, tie_word_embeddings=False)).eval()
    randomise(t5, generator, 0.3)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, sample_size=16).eval()
    randomise(vae, generator, 0.1)
    transformer = LatteTransformer3DModel(
        num_attention_heads=3, attention_head_dim=8, in_channels=4, out_channels=8, num_layers=2, dropout=0.0,
        cross_attention_dim=24, attention_bias=True, sample_size=8, patch_size=2, activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000, norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6,
        caption_channels=32, video_length=FRAMES).eval()
    randomise(transformer, generator, 0.2)
    scheduler = DDIMScheduler(beta_start=0.0001, beta_end=0.02, beta_schedule="linear", num_train_timesteps=1000,
                              prediction_type="epsilon", timestep_spacing="leading", clip_sample=False,
                              thresholding=False)
    pipe = LattePipeline(tokenizer=tokenizer, text_encoder=t5, vae=vae, transformer=transformer, scheduler=scheduler)
    return pipe, tokenizer_dir


def main():
    out = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    if fixture_output.skipped_without(out, "make_latte_t2v_pipeline_fixture", "torch", "diffusers", "transformers",
                                      "sentencepiece"):
        return
    import torch
    import safetensors_io
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = os.path.join(out, "work")
    os.makedirs(work)
    pipe, tokenizer_dir = build_pipeline(work)
    pipe.save_pretrained(os.path.join(out, "pipeline"))
    # Latte-1's tokenizer/ holds spiece.model and no tokenizer.json; transformers 5 saves only the latter.
    shutil.rmtree(os.path.join(out, "pipeline", "tokenizer"))
    shutil.copytree(tokenizer_dir, os.path.join(out, "pipeline", "tokenizer"))
    shutil.rmtree(work)
    config_path = os.path.join(out, "pipeline", "scheduler", "scheduler_config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["variance_type"] = "learned_range"  # Latte-1's published scheduler config carries it
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)

    expected = os.path.join(out, "expected")
    os.makedirs(expected)
    h, w = HEIGHT // 2, WIDTH // 2
    noise = torch.randn(1, 4, FRAMES, h, w, generator=torch.Generator().manual_seed(99))
    noise2 = torch.randn(2, 4, FRAMES, h, w, generator=torch.Generator().manual_seed(98))
    common = dict(negative_prompt=NEGATIVE, num_inference_steps=STEPS, height=HEIGHT, width=WIDTH,
                  video_length=FRAMES, clean_caption=False, mask_feature=True, enable_temporal_attentions=True)
    with torch.no_grad():
        latents = pipe(PROMPT, guidance_scale=CFG, latents=noise.clone(), output_type="latent", **common).frames
        video = pipe(PROMPT, guidance_scale=CFG, latents=noise.clone(), output_type="pt", **common).frames[0]
        seeded = pipe(PROMPT, guidance_scale=CFG, generator=torch.Generator().manual_seed(SEED),
                      output_type="latent", **common).frames
        two = pipe(PROMPTS2, guidance_scale=CFG, latents=noise2.clone(), output_type="latent", **common).frames
        no_cfg = pipe(PROMPT, guidance_scale=1.0, latents=noise.clone(), output_type="latent", **common).frames
    safetensors_io.save(os.path.join(expected, "noise.safetensors"), {"latents": noise})
    safetensors_io.save(os.path.join(expected, "noise2.safetensors"), {"latents": noise2})
    safetensors_io.save(os.path.join(expected, "one_prompt.safetensors"), {"latents": latents, "video": video})
    safetensors_io.save(os.path.join(expected, "seeded.safetensors"), {"latents": seeded})
    safetensors_io.save(os.path.join(expected, "two_prompts.safetensors"), {"latents": two})
    safetensors_io.save(os.path.join(expected, "no_cfg.safetensors"), {"latents": no_cfg})
    with open(os.path.join(expected, "settings.json"), "w") as f:
        json.dump(dict(prompt=PROMPT, prompts2=PROMPTS2, negative_prompt=NEGATIVE, steps=STEPS, cfg_scale=CFG,
                       frames=FRAMES, height=HEIGHT, width=WIDTH, seed=SEED), f, indent=2)


if __name__ == "__main__":
    main()
