#!/usr/bin/env python3
"""A tiny random Sana pipeline built with diffusers and transformers, and SanaPipeline's own samples from it, for
tune's `tune infer PIPELINE_DIR` parity test (tests/cli/sana_tests.sh).

    .venv/bin/python scripts/make_sana_pipeline_fixture.py --out DIR     (deterministic; run by CTest)

DIR/pipeline/   SanaPipeline.save_pretrained: model_index.json; transformer/ (SanaTransformer2DModel: 2 layers,
                hidden 32, caption_channels 48, qk_norm off, sample_size 8: no aspect-ratio table), vae/ (AutoencoderDC: channels [8, 16, 32], factor 4,
                8 latent channels), text_encoder/ (Gemma2Model: 2 layers, hidden 48, head_dim 16, soft-capped,
                sliding window 8, eager attention), tokenizer/ (a Gemma-style BPE tokenizer.json trained here on the
                prompts and the complex human instruction: <pad> 0, <eos> 1, <bos> 2, <unk> 3, spaces as "▁", BOS
                prepended), scheduler/ (DPMSolverMultistepScheduler as Sana publishes it: flow sigmas, shift 3)
DIR/euler_scheduler/  FlowMatchEulerDiscreteScheduler(shift=3.0), the other scheduler Sana pipelines ship
DIR/noise.safetensors  "latents" [2, 8, 16, 16]: the initial latents of both prompts (diffusers' layout)
DIR/expected.safetensors  per case CASE (below): CASE.latents [2, 8, 16, 16], the pipeline's final latents
                (output_type="latent"), and CASE.image [2, 3, 64, 64], vae.decode(latents / scaling_factor) in [-1, 1]
Cases: dpm (the pipeline's DPMSolver, 6 steps, guidance 4.5, the complex human instruction on, as SanaPipeline's
defaults), euler (FlowMatchEuler, 5 steps, guidance 3.0, no instruction, negative prompt "blurry"). Both at 64 x 64 with
use_resolution_binning off (tune samples the size asked), max_sequence_length 300, float32. And binned: the
transformer saved again with sample_size 16 (DIR/binned_transformer, the 512 table), one prompt at 200 x 560 with
use_resolution_binning on, from DIR/binned_noise.safetensors [1, 8, 72, 208]: binned.image [1, 3, 200, 560] in [0, 1].

If torch, transformers, tokenizers or diffusers is missing, writes DIR/SKIPPED with the reason and exits 0.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_output  # noqa: E402

PROMPTS = ["a red circle at the top left", "A Blue Square, bottom right  "]
DCAE = dict(in_channels=3, latent_channels=8, attention_head_dim=8,
            encoder_block_types=["ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
            decoder_block_types=["ResBlock", "EfficientViTBlock", "EfficientViTBlock"],
            encoder_block_out_channels=[8, 16, 32], decoder_block_out_channels=[8, 16, 32],
            encoder_qkv_multiscales=[[], [5], [5]], decoder_qkv_multiscales=[[], [5], [5]],
            encoder_layers_per_block=[1, 1, 1], decoder_layers_per_block=[1, 1, 1], downsample_block_type="Conv",
            upsample_block_type="interpolate", decoder_norm_types="rms_norm", decoder_act_fns="silu",
            scaling_factor=0.41407)
SCHEDULER = dict(algorithm_type="dpmsolver++", solver_order=2, solver_type="midpoint", prediction_type="flow_prediction",
                 use_flow_sigmas=True, flow_shift=3.0, final_sigmas_type="zero", lower_order_final=True,
                 timestep_spacing="linspace", num_train_timesteps=1000)


def make_tokenizer(tmp):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, processors, trainers
    from transformers import GemmaTokenizerFast
    from diffusers import SanaPipeline
    import inspect
    chi = inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default
    corpus = ["\n".join(chi)] + PROMPTS + ["blurry", "a green triangle in the middle", "a small yellow star"]
    corpus = [text.lower() for text in corpus]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " ")])
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"],
                                  initial_alphabet=list("abcdefghijklmnopqrstuvwxyz0123456789▁\n'.,:->"))
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    path = os.path.join(tmp, "tokenizer.json")
    tok.save(path)
    return GemmaTokenizerFast(tokenizer_file=path, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                              unk_token="<unk>", add_bos_token=True, add_eos_token=False)


def main():
    out = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    if fixture_output.skipped_without(out, "make_sana_pipeline_fixture", "torch", "transformers", "tokenizers",
                                      "diffusers"):
        return
    import torch
    from diffusers import (AutoencoderDC, DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler, SanaPipeline,
                           SanaTransformer2DModel)
    from transformers import Gemma2Config, Gemma2Model
    import safetensors_io

    torch.manual_seed(0)
    tokenizer = make_tokenizer(out)
    os.remove(os.path.join(out, "tokenizer.json"))  # saved again by the pipeline, with its config
    text_config = Gemma2Config(vocab_size=len(tokenizer), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                               num_attention_heads=3, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                               sliding_window=8, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                               max_position_embeddings=1024, rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1,
                               pad_token_id=0, hidden_activation="gelu_pytorch_tanh")
    text_config._attn_implementation = "eager"  # SDPA would drop the soft-cap
    text_encoder = Gemma2Model(text_config).eval()
    transformer = SanaTransformer2DModel(in_channels=8, out_channels=8, num_attention_heads=4, attention_head_dim=8,
                                         num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=16,
                                         cross_attention_dim=32, caption_channels=48, sample_size=8).eval()
    vae = AutoencoderDC(**DCAE).eval()
    generator = torch.Generator().manual_seed(20251126)
    with torch.no_grad():  # random weights at sizes that matter (some start at zero or one)
        for module in (transformer, vae, text_encoder):
            for name, p in module.named_parameters():
                if p.dim() == 1:
                    p.copy_((0.2 if name.endswith("bias") else 1.0) * torch.randn(p.shape, generator=generator)
                            + (0.0 if name.endswith("bias") else 1.0) * (p.dim() == 1 and "norm" in name))
                else:
                    p.copy_(torch.randn(p.shape, generator=generator) / p[0].numel() ** 0.5)
    pipe = SanaPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                        scheduler=DPMSolverMultistepScheduler(**SCHEDULER))
    pipe.save_pretrained(os.path.join(out, "pipeline"), safe_serialization=True)
    FlowMatchEulerDiscreteScheduler(shift=3.0).save_pretrained(os.path.join(out, "euler_scheduler"))

    noise = torch.randn(2, 8, 16, 16, generator=generator)
    safetensors_io.save(os.path.join(out, "noise.safetensors"), {"latents": noise})
    cases = {
        "dpm": dict(steps=6, guidance=4.5, negative="", chi=True, scheduler=None),
        "euler": dict(steps=5, guidance=3.0, negative="blurry", chi=False,
                      scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0)),
    }
    records = {}
    for name, case in cases.items():
        if case["scheduler"] is not None:
            pipe.scheduler = case["scheduler"]
        kwargs = {} if case["chi"] else {"complex_human_instruction": None}
        with torch.no_grad():
            latents = pipe(prompt=PROMPTS, negative_prompt=case["negative"], height=64, width=64,
                           num_inference_steps=case["steps"], guidance_scale=case["guidance"], latents=noise.clone(),
                           output_type="latent", use_resolution_binning=False, max_sequence_length=300,
                           **kwargs).images
            image = vae.decode(latents / vae.config.scaling_factor, return_dict=False)[0]
        records[f"{name}.latents"] = latents.contiguous()
        records[f"{name}.image"] = image.contiguous()
        print(f"  {name}: latents std {latents.std().item():.4f}, image range [{image.min().item():.3f}, "
              f"{image.max().item():.3f}]")
    # Resolution binning (SanaPipeline's default): the same transformer with sample_size 16 selects the 512 table;
    # 200 x 560 is generated at its bin 288 x 832 (ratio key 0.35), decoded, then scaled and cropped back.
    pipe.scheduler = DPMSolverMultistepScheduler(**SCHEDULER)
    transformer.register_to_config(sample_size=16)
    transformer.save_pretrained(os.path.join(out, "binned_transformer"), safe_serialization=True)
    binned_noise = torch.randn(1, 8, 288 // 4, 832 // 4, generator=generator)
    with torch.no_grad():
        image = pipe(prompt=PROMPTS[0], height=200, width=560, num_inference_steps=2, guidance_scale=4.5,
                     latents=binned_noise.clone(), output_type="pt", use_resolution_binning=True,
                     max_sequence_length=300).images
    assert tuple(image.shape) == (1, 3, 200, 560), image.shape
    safetensors_io.save(os.path.join(out, "binned_noise.safetensors"), {"latents": binned_noise})
    records["binned.image"] = image.contiguous()
    print(f"  binned: 200 x 560 via 288 x 832, image range [{image.min().item():.3f}, {image.max().item():.3f}]")
    safetensors_io.save(os.path.join(out, "expected.safetensors"), records)
    print(f"make_sana_pipeline_fixture: wrote {out}")


if __name__ == "__main__":
    main()
