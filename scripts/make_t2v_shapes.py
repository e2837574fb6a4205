#!/usr/bin/env python3
"""Data and a from-scratch pipeline for the text-to-video default (recipes/latte-t2v-tiny.yaml): captioned moving
shapes, and a tiny Latte-1-shaped diffusers pipeline directory to train.

    .venv/bin/python scripts/make_t2v_shapes.py --out data/t2v-shapes     (deterministic; the VAE fit takes a few minutes on 2 cores)

Writes
  OUT/videos/NNNN/frame_*.png   4-frame 16x16 videos of a 4-pixel square crossing a black frame at 4 px/frame
                                (scripts/make_moving_shapes.py draws them), in one of four colours and directions
  OUT/captions.jsonl            {"video", "caption"}: "a red square moving left" ... for the training pairs
  OUT/heldout.json              the colour x direction pairs left out of training (one per colour and direction)
  OUT/pipeline/                 a LattePipeline directory whose transformer tune trains from scratch:
    tokenizer/    a sentencepiece spiece.model trained on every caption of the 16 pairs, T5's conventions; a word
                  model (one token per word: on 16 short captions the Unigram trainer keeps only characters, and
                  "a yellow square moving left" became 27 tokens). tune reads it with the sentencepiece library;
                  transformers' T5Tokenizer, which converts spiece.model to a Unigram model, does not take it
    text_encoder/ a tiny T5 v1.1 encoder with random weights, frozen (a fixed random map from words to vectors is
                  all the conditioning needs: the transformer learns what the vectors mean)
    vae/          a tiny AutoencoderKL (factor 2: 16x16x3 -> 8x8x4) trained here on the frames for reconstruction,
                  its scaling_factor set to 1 / std of the latents (as Stable Diffusion's was chosen)
    transformer/  LatteTransformer3DModel, 3 spatial + 3 temporal blocks, hidden 64, 406k parameters (diffusers'
                  initialisation; with 2 + 2 blocks the direction in the caption was learned too late on some CPUs)
    scheduler/    DDIM with the squared-cosine schedule (the class default found the linear one learned too slowly
                  at this size), learned-range variance as Latte-1's config
Needs torch, diffusers, transformers and sentencepiece in .venv (scripts/setup.sh installs them).
"""
import argparse
import json
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_moving_shapes as shapes  # noqa: E402

COLOURS = {"red": (255, 64, 64), "green": (64, 255, 64), "blue": (64, 128, 255), "yellow": (255, 255, 64)}
DIRECTIONS = ["right", "left", "down", "up"]  # make_moving_shapes' labels 0..3
# One held-out pair per colour and per direction, so every word is seen in training, never these combinations.
HELD_OUT = [("red", "up"), ("green", "left"), ("blue", "down"), ("yellow", "right")]
FRAMES, SIZE, SIDE = 4, 16, 4


def caption(colour, direction):
    return f"a {colour} square moving {direction}"


def write_videos(out, videos_per_pair, seed):
    rng = random.Random(seed)
    rows = []
    index = 0
    for colour, rgb in COLOURS.items():
        for label, direction in enumerate(DIRECTIONS):
            if (colour, direction) in HELD_OUT:
                continue
            for _ in range(videos_per_pair):
                video = shapes.make_video(rng, label, FRAMES, SIZE, SIDE, "square", "fixed", -1)
                video["colour"] = list(rgb)
                folder = os.path.join("videos", f"{index:04d}")
                shapes.write_frames(os.path.join(out, folder), video, FRAMES, SIZE, SIDE, "square")
                rows.append({"video": folder, "caption": caption(colour, direction)})
                index += 1
    with open(os.path.join(out, "captions.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(out, "heldout.json"), "w") as f:
        json.dump({"held_out": [caption(c, d) for c, d in HELD_OUT],
                   "trained": sorted({row["caption"] for row in rows})}, f, indent=2)
    return rows


def frames_tensor(out, rows):
    """Every frame of the training videos, [N, 3, 16, 16] in [-1, 1] (the VAE's training set)."""
    import numpy
    import torch
    from PIL import Image
    images = []
    for row in rows:
        folder = os.path.join(out, row["video"])
        for name in sorted(os.listdir(folder)):
            pixels = torch.from_numpy(numpy.asarray(Image.open(os.path.join(folder, name)).convert("RGB")).copy())
            images.append(pixels.float().permute(2, 0, 1) / 127.5 - 1.0)
    return torch.stack(images)


def train_vae(frames, steps, generator):
    """A tiny AutoencoderKL fitted to the frames: reconstruction MSE plus a small KL, Adam."""
    import torch
    from diffusers import AutoencoderKL
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64), layers_per_block=1,
                        latent_channels=4, norm_num_groups=8, sample_size=SIZE)
    optimizer = torch.optim.Adam(vae.parameters(), lr=2e-3)
    for step in range(steps):
        batch = frames[torch.randint(0, frames.size(0), (64,), generator=generator)]
        posterior = vae.encode(batch).latent_dist
        reconstruction = vae.decode(posterior.sample(generator=generator)).sample
        mse = torch.nn.functional.mse_loss(reconstruction, batch)
        loss = mse + 1e-6 * posterior.kl().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 200 == 0 or step == steps - 1:
            print(f"  vae step {step}: reconstruction mse {mse.item():.5f}", flush=True)
    vae.eval()
    with torch.no_grad():
        latents = vae.encode(frames[:512]).latent_dist.mean
        vae.register_to_config(scaling_factor=float(1.0 / latents.std()))
        error = (vae.decode(latents).sample - frames[:512]).abs().max().item()
    print(f"  vae: scaling_factor {vae.config.scaling_factor:.4f}, max reconstruction error {error:.3f} (of 2)")
    return vae


def build_pipeline(out, rows, vae_steps, num_layers):
    import torch
    import sentencepiece as spm
    from diffusers import DDIMScheduler, LattePipeline, LatteTransformer3DModel
    from transformers import T5Config, T5EncoderModel, T5Tokenizer
    import make_t5_fixture as t5_fixture

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    work = os.path.join(out, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    every_caption = [caption(c, d) for c in COLOURS for d in DIRECTIONS]
    with open(os.path.join(work, "corpus.txt"), "w") as f:
        f.write("\n".join(every_caption * 8) + "\n")
    spm.set_random_generator_seed(1)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        spm.SentencePieceTrainer.train(
            input="corpus.txt", model_prefix="spiece", vocab_size=16, model_type="word", pad_id=0, eos_id=1,
            unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>", character_coverage=1.0,
            num_threads=1, minloglevel=2, hard_vocab_limit=False)
    finally:
        os.chdir(cwd)
    spiece = os.path.join(work, "spiece.model")
    pieces = spm.SentencePieceProcessor(model_file=spiece).get_piece_size()
    tokenizer_dir = os.path.join(work, "tokenizer")
    t5_fixture.write_t5_v11_style_tokenizer(tokenizer_dir, spiece, pieces)
    tokenizer = T5Tokenizer.from_pretrained(tokenizer_dir)
    t5 = T5EncoderModel(T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                 relative_attention_num_buckets=32, relative_attention_max_distance=128,
                                 feed_forward_proj="gated-gelu", dropout_rate=0.0, is_encoder_decoder=False,
                                 use_cache=False, tie_word_embeddings=False)).eval()
    print("training the VAE on the frames")
    vae = train_vae(frames_tensor(out, rows), vae_steps, generator)
    transformer = LatteTransformer3DModel(
        num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=8, num_layers=num_layers, dropout=0.0,
        cross_attention_dim=64, attention_bias=True, sample_size=SIZE // 2, patch_size=2,
        activation_fn="gelu-approximate", num_embeds_ada_norm=1000, norm_type="ada_norm_single",
        norm_elementwise_affine=False, norm_eps=1e-6, caption_channels=32, video_length=FRAMES)
    scheduler = DDIMScheduler(beta_schedule="squaredcos_cap_v2", num_train_timesteps=1000, prediction_type="epsilon",
                              timestep_spacing="leading", clip_sample=False, thresholding=False)
    pipe = LattePipeline(tokenizer=tokenizer, text_encoder=t5, vae=vae, transformer=transformer, scheduler=scheduler)
    target = os.path.join(out, "pipeline")
    shutil.rmtree(target, ignore_errors=True)
    pipe.save_pretrained(target)
    # Latte-1's tokenizer/ holds spiece.model (transformers 5 would save a tokenizer.json only).
    shutil.rmtree(os.path.join(target, "tokenizer"))
    shutil.copytree(tokenizer_dir, os.path.join(target, "tokenizer"))
    config_path = os.path.join(target, "scheduler", "scheduler_config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["variance_type"] = "learned_range"
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    shutil.rmtree(work)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--videos-per-pair", type=int, default=48, help="training videos per colour x direction")
    parser.add_argument("--vae-steps", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-layers", type=int, default=3, help="spatial blocks (as many temporal ones)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = write_videos(args.out, args.videos_per_pair, args.seed)
    print(f"{len(rows)} captioned videos in {args.out} ({len(HELD_OUT)} colour x direction pairs held out)")
    import torch
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    build_pipeline(args.out, rows, args.vae_steps, args.num_layers)
    print(f"pipeline: {os.path.join(args.out, 'pipeline')}")


if __name__ == "__main__":
    main()
