#!/usr/bin/env python3
"""Data and a from-scratch pipeline for the Sana default (recipes/sana-tiny.yaml): captioned images of coloured shapes
at positions ("a red circle at the top left"), and a tiny SanaPipeline directory whose transformer tune trains.

    .venv/bin/python scripts/make_sana_shapes.py --out data/sana-shapes    (deterministic; the DC-AE fit takes a few minutes)

Writes
  OUT/images/NNNNN.png + .txt   32 x 32 images: one shape (circle, square, triangle) of 12 px (+-1) in one of four
                                colours, in one of four quadrants (+-2 px of jitter), on black; the caption beside it
  OUT/captions.jsonl            {"image", "caption"} for the training combinations
  OUT/heldout.json              the colour x shape x position combinations left out of training (every colour, shape
                                and position is still seen, never these combinations), and every combination's caption
  OUT/pipeline/                 a SanaPipeline directory:
    tokenizer/    a Gemma-style BPE tokenizer.json trained on the captions (BOS, right padding)
    text_encoder/ a tiny Gemma 2 (hidden 32, 2 layers, eager soft-capped attention) with random weights, frozen: a fixed
                  random map from words to vectors is all the conditioning needs; the transformer learns what they mean
    vae/          a tiny AutoencoderDC (factor 4: 32x32x3 -> 8x8x8) fitted here to the images for reconstruction, its
                  scaling_factor 1 / std of the latents
    transformer/  SanaTransformer2DModel, 4 blocks of 4 heads x 16 (hidden 64), diffusers' initialisation
    scheduler/    DPMSolverMultistep with flow sigmas, flow_shift 3.0 (the published Sana scheduler config)
Needs torch, diffusers, transformers and tokenizers in .venv (scripts/setup.sh installs them).
"""
import argparse
import itertools
import json
import os
import random
import shutil

COLOURS = {"red": (230, 40, 40), "green": (40, 200, 60), "blue": (50, 90, 240), "yellow": (235, 220, 40)}
SHAPES = ["circle", "square", "triangle"]
POSITIONS = {"top left": (0, 0), "top right": (1, 0), "bottom left": (0, 1), "bottom right": (1, 1)}
# Six combinations held out; each colour, shape and position stays in training with other partners.
HELD_OUT = [("red", "circle", "bottom right"), ("green", "square", "top left"), ("blue", "triangle", "top right"),
            ("yellow", "circle", "bottom left"), ("red", "triangle", "top left"), ("blue", "square", "bottom left")]
SIZE = 32


def caption(colour, shape, position):
    return f"a {colour} {shape} at the {position}"


def draw(colour, shape, position, rng):
    from PIL import Image, ImageDraw
    image = Image.new("RGB", (SIZE, SIZE), (0, 0, 0))
    side = 12 + rng.randint(-1, 1)
    qx, qy = POSITIONS[position]
    cx = 8 + 16 * qx + rng.randint(-2, 2)
    cy = 8 + 16 * qy + rng.randint(-2, 2)
    box = [cx - side // 2, cy - side // 2, cx - side // 2 + side - 1, cy - side // 2 + side - 1]
    pen = ImageDraw.Draw(image)
    if shape == "circle":
        pen.ellipse(box, fill=COLOURS[colour])
    elif shape == "square":
        pen.rectangle(box, fill=COLOURS[colour])
    else:
        pen.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) / 2, box[1])], fill=COLOURS[colour])
    return image


def write_images(out, per_combination, seed):
    rng = random.Random(seed)
    rows = []
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    for combination in itertools.product(COLOURS, SHAPES, POSITIONS):
        if combination in HELD_OUT:
            continue
        for _ in range(per_combination):
            name = f"images/{len(rows):05d}.png"
            draw(*combination, rng).save(os.path.join(out, name))
            text = caption(*combination)
            with open(os.path.join(out, name[:-4] + ".txt"), "w") as f:
                f.write(text + "\n")
            rows.append({"image": name, "caption": text})
    with open(os.path.join(out, "captions.jsonl"), "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    with open(os.path.join(out, "heldout.json"), "w") as f:
        json.dump({"held_out": [caption(*c) for c in HELD_OUT],
                   "all": [caption(*c) for c in itertools.product(COLOURS, SHAPES, POSITIONS)],
                   "colours": COLOURS, "shapes": SHAPES, "positions": list(POSITIONS)}, f, indent=1)
    return rows


def make_tokenizer(work):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import GemmaTokenizerFast
    corpus = [caption(*c) for c in itertools.product(COLOURS, SHAPES, POSITIONS)] + [""]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " ")])
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"],
                                  initial_alphabet=list("abcdefghijklmnopqrstuvwxyz▁"))
    tok.train_from_iterator(corpus * 4, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    path = os.path.join(work, "tokenizer.json")
    tok.save(path)
    return GemmaTokenizerFast(tokenizer_file=path, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                              unk_token="<unk>", add_bos_token=True, add_eos_token=False)


def images_tensor(out, rows):
    import numpy
    import torch
    from PIL import Image
    pixels = [numpy.asarray(Image.open(os.path.join(out, row["image"])).convert("RGB")) for row in rows]
    return torch.from_numpy(numpy.stack(pixels)).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def fit_dcae(images, steps, generator):
    """A tiny AutoencoderDC fitted to the images: reconstruction MSE, Adam (DC-AE has no posterior to regularise)."""
    import torch
    from diffusers import AutoencoderDC
    vae = AutoencoderDC(in_channels=3, latent_channels=8, attention_head_dim=8,
                        encoder_block_types=["ResBlock", "ResBlock", "EfficientViTBlock"],
                        decoder_block_types=["ResBlock", "ResBlock", "EfficientViTBlock"],
                        encoder_block_out_channels=[16, 32, 32], decoder_block_out_channels=[16, 32, 32],
                        encoder_qkv_multiscales=[[], [], [5]], decoder_qkv_multiscales=[[], [], [5]],
                        encoder_layers_per_block=[1, 1, 1], decoder_layers_per_block=[1, 1, 1],
                        downsample_block_type="Conv", upsample_block_type="interpolate", decoder_norm_types="rms_norm",
                        decoder_act_fns="silu", scaling_factor=1.0)
    optimizer = torch.optim.Adam(vae.parameters(), lr=2e-3)
    for step in range(steps):
        batch = images[torch.randint(0, images.size(0), (32,), generator=generator)]
        reconstruction = vae.decode(vae.encode(batch).latent).sample
        loss = torch.nn.functional.mse_loss(reconstruction, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 200 == 0 or step == steps - 1:
            print(f"  dc-ae step {step}: reconstruction mse {loss.item():.5f}", flush=True)
    vae.eval()
    with torch.no_grad():
        latents = vae.encode(images[:512]).latent
        vae.register_to_config(scaling_factor=float(1.0 / latents.std()))
        error = (vae.decode(latents).sample - images[:512]).abs().mean().item()
    print(f"  dc-ae: scaling_factor {vae.config.scaling_factor:.4f}, mean reconstruction error {error:.4f} (of 2)")
    return vae


def build_pipeline(out, rows, vae_steps):
    import torch
    from diffusers import DPMSolverMultistepScheduler, SanaPipeline, SanaTransformer2DModel
    from transformers import Gemma2Config, Gemma2Model
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    work = os.path.join(out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tokenizer = make_tokenizer(work)
    text_config = Gemma2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16,
                               sliding_window=32, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                               max_position_embeddings=256, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    text_config._attn_implementation = "eager"
    text_encoder = Gemma2Model(text_config).eval()
    print("fitting the DC-AE to the images")
    vae = fit_dcae(images_tensor(out, rows), vae_steps, generator)
    transformer = SanaTransformer2DModel(in_channels=8, out_channels=8, num_attention_heads=4, attention_head_dim=16,
                                         num_layers=4, num_cross_attention_heads=4, cross_attention_head_dim=16,
                                         cross_attention_dim=64, caption_channels=32, sample_size=8)
    scheduler = DPMSolverMultistepScheduler(algorithm_type="dpmsolver++", solver_order=2, solver_type="midpoint",
                                            prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                                            final_sigmas_type="zero", lower_order_final=True,
                                            timestep_spacing="linspace")
    pipe = SanaPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                        scheduler=scheduler)
    target = os.path.join(out, "pipeline")
    shutil.rmtree(target, ignore_errors=True)
    pipe.save_pretrained(target, safe_serialization=True)
    shutil.rmtree(work)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-combination", type=int, default=40, help="training images per colour x shape x position")
    parser.add_argument("--vae-steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = write_images(args.out, args.per_combination, args.seed)
    print(f"{len(rows)} captioned images in {args.out} ({len(HELD_OUT)} combinations held out)")
    import torch
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    build_pipeline(args.out, rows, args.vae_steps)
    print(f"pipeline: {os.path.join(args.out, 'pipeline')}")


if __name__ == "__main__":
    main()
