#!/usr/bin/env python3
"""tune against Hugging Face transformers + peft on one GPU: a Llama-3.2-1B-shaped model (random weights), full
fine-tune and LoRA, gradient checkpointing off and on, side by side in one run.

    python3 scripts/bench_gpu.py --tune-bench build-cuda/apps/bench/tune-bench [--seq 2048] [--steps 5] [--out F]

Every configuration runs in a fresh process (the caching allocator's peak then belongs to it alone), tune and HF
alternately, with the same shapes, data sizes and optimizer:
  - model: hidden 2048, 16 layers, 32 query / 8 key-value heads, MLP 8192, vocab 128256, tied embeddings, RoPE base
    500000 (Llama-3.2-1B without its RoPE scaling), fp32 master weights, bf16 autocast;
  - one step = forward, loss, backward, AdamW update (torch.optim.AdamW, its default foreach implementation, on the
    HF side; tune's AdamW), gradients set to none after the update; batch 1 x --seq random tokens;
  - HF: LlamaForCausalLM with attn_implementation="sdpa"; checkpointing by gradient_checkpointing_enable(use_reentrant
    False); LoRA by peft (rank 16, alpha 32, every projection, no dropout). tune: apps/bench/tune-bench with the same
    settings, policy full or off, the fused linear cross-entropy (--loss fused) and, for reference, the plain loss.
Reported per configuration: median step time over --steps steps after 2 warm-up steps, tokens/s, peak memory
(torch.cuda.max_memory_allocated for HF, the caching allocator's same counter in tune) during a step, and MFU:
model FLOPs per step (6 x matmul parameters x tokens + 12 x layers x hidden x seq x tokens; for LoRA 4x instead of
6x on the frozen weights, whose weight gradients are not computed) over the measured bf16 matmul rate of this GPU
(an 8192^3 bf16 product, median of 20). Ratios tune/HF are in the last columns.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

MODEL = dict(vocab=128256, hidden=2048, layers=16, heads=32, kv_heads=8, intermediate=8192, rope_theta=500000.0)
LORA_RANK = 16


def matmul_peak_tflops():
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * 8192 ** 3 / statistics.median(times) / 1e12


def hf_worker(args):
    """One HF configuration in this process; prints one JSON line."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=MODEL["vocab"], hidden_size=MODEL["hidden"], num_hidden_layers=MODEL["layers"],
                         num_attention_heads=MODEL["heads"], num_key_value_heads=MODEL["kv_heads"],
                         intermediate_size=MODEL["intermediate"], rope_theta=MODEL["rope_theta"],
                         max_position_embeddings=max(args.seq, 2048), tie_word_embeddings=True, rms_norm_eps=1e-5,
                         attn_implementation="sdpa")
    with torch.device("cuda"):  # initialised on the GPU: seconds, not the CPU's minute
        model = LlamaForCausalLM(config)
    if args.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj"]))
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0)
    ids = torch.randint(0, MODEL["vocab"], (1, args.seq), device="cuda")
    labels = torch.randint(0, MODEL["vocab"], (1, args.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    print(json.dumps({"tool": "hf", "step_s": statistics.median(times), "step_s_all": times,
                      "peak_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss),
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "trainable_parameters": sum(p.numel() for p in trainable)}))


def run_json(command):
    completed = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [l for l in completed.stdout.splitlines() if l.startswith("{")]
    if completed.returncode != 0 or not lines:
        return {"error": f"exit {completed.returncode}: {completed.stderr[-1500:]}"}
    return json.loads(lines[-1])


def model_flops(seq, lora):
    h, L, i, v = MODEL["hidden"], MODEL["layers"], MODEL["intermediate"], MODEL["vocab"]
    head_dim = h // MODEL["heads"]
    kv = MODEL["kv_heads"] * head_dim
    matmul_params = L * (h * h * 2 + h * kv * 2 + 3 * h * i) + v * h  # q, o, k, v, MLP; lm_head (tied)
    dense = (4 if lora else 6) * matmul_params * seq  # frozen weights: forward + input gradient only
    attention = 12 * L * h * seq * seq
    return dense + attention


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tune-bench", default="build-cuda/apps/bench/tune-bench")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default="")
    parser.add_argument("--configs", default="full-off,full-on,lora-off,lora-on")
    parser.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lora", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_worker:
        return hf_worker(args)

    import torch
    peak = matmul_peak_tflops()
    print(f"bf16 matmul 8192^3: {peak:.0f} TFLOP/s on {torch.cuda.get_device_name()}", flush=True)
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "matmul_tflops": peak,
               "seq": args.seq, "model": MODEL, "lora_rank": LORA_RANK, "rows": []}
    for name in args.configs.split(","):
        mode, ckpt = name.split("-")
        lora, checkpointing = mode == "lora", ckpt == "on"
        hf_cmd = [sys.executable, __file__, "--hf-worker", "--seq", str(args.seq), "--steps", str(args.steps)]
        hf_cmd += ["--lora"] if lora else []
        hf_cmd += ["--checkpointing"] if checkpointing else []
        tune_cmd = [args.tune_bench, "--device", "cuda", "--optimizer", "--tie-embeddings", "--dtype", "bf16",
                    "--seq", str(args.seq), "--steps", str(args.steps), "--warmup", "2",
                    "--policy", "full" if checkpointing else "off", "--rope-theta", str(MODEL["rope_theta"]),
                    "--layers", str(MODEL["layers"]), "--hidden", str(MODEL["hidden"]), "--heads", str(MODEL["heads"]),
                    "--kv-heads", str(MODEL["kv_heads"]), "--intermediate", str(MODEL["intermediate"]),
                    "--vocab", str(MODEL["vocab"]), "--lora-rank", str(LORA_RANK if lora else 0)]
        flops = model_flops(args.seq, lora)
        row = {"config": name}
        for label, command in (("hf", hf_cmd), ("tune", tune_cmd + ["--loss", "fused"]),
                               ("tune_plain_loss", tune_cmd + ["--loss", "plain"])):
            r = run_json(command)
            if "error" in r:
                row[label] = r
                print(f"{name} {label}: {r['error']}", flush=True)
                continue
            step = r["step_s"]
            peak_bytes = r.get("peak_bytes", r.get("tracked_peak_bytes"))
            row[label] = {"step_s": step, "tokens_per_s": args.seq / step, "peak_gib": peak_bytes / 2 ** 30,
                          "mfu": flops / step / (peak * 1e12), "loss": r.get("loss", r.get("loss_sum")),
                          "raw": r}
            print(f"{name} {label}: {step * 1e3:.1f} ms/step, {args.seq / step:.0f} tokens/s, "
                  f"peak {peak_bytes / 2 ** 30:.2f} GiB, MFU {row[label]['mfu']:.1%}", flush=True)
        results["rows"].append(row)

    print(f"\n| config | HF tokens/s | tune tokens/s | x | HF peak GiB | tune peak GiB | x | HF MFU | tune MFU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in results["rows"]:
        hf, tu = row.get("hf", {}), row.get("tune", {})
        if "step_s" not in hf or "step_s" not in tu:
            print(f"| {row['config']} | failed | | | | | | | |")
            continue
        print(f"| {row['config']} | {hf['tokens_per_s']:.0f} | {tu['tokens_per_s']:.0f} | "
              f"{tu['tokens_per_s'] / hf['tokens_per_s']:.2f} | {hf['peak_gib']:.2f} | {tu['peak_gib']:.2f} | "
              f"{tu['peak_gib'] / hf['peak_gib']:.2f} | {hf['mfu']:.1%} | {tu['mfu']:.1%} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
