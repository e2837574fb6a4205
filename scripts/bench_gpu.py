#!/usr/bin/env python3
"""tune against Hugging Face transformers + peft (+ bitsandbytes for QLoRA) on one GPU: a Llama-3.2-1B-shaped model
(random weights), full fine-tune, LoRA and QLoRA, gradient checkpointing off and on, batch 1 to 4 x 2048 tokens, side
by side in one run, and tune's speed levers each alone and together.

    python3 scripts/bench_gpu.py --tune-bench build-cuda/apps/bench/tune-bench [--seq 2048] [--steps 5] [--out F]
        [--rows full-off-b1,...] [--variants all,all+graph,...] [--profile-dir DIR] [--profiles lora-on-b1-plain,...]

Same shapes, data sizes and optimizer on both sides:
  - model: hidden 2048, 16 layers, 32 query / 8 key-value heads, MLP 8192, vocab 128256, tied embeddings, RoPE base
    500000 (Llama-3.2-1B without its RoPE scaling), fp32 master weights, bf16 autocast; LoRA rows store the frozen
    base in bf16 on both sides (HF: model.to(bfloat16) before peft, which keeps the adapters in fp32; tune:
    param_dtype bf16), as LoRA users on a GPU load it;
  - one step = forward, loss, backward, AdamW update, gradients set to none after the update; random tokens;
  - HF: LlamaForCausalLM with attn_implementation="sdpa"; torch.optim.AdamW(fused=True), HF Trainer's default
    optimizer (adamw_torch_fused); checkpointing by gradient_checkpointing_enable(use_reentrant=False); LoRA by peft
    (rank 16, alpha 32, every projection, no dropout). QLoRA: the random bf16 model saved once, then loaded with
    BitsAndBytesConfig(load_in_4bit, nf4, double quantisation, bf16 compute) as users load a checkpoint, then peft
    as for LoRA (without prepare_model_for_kbit_training, which would cast the norms and embeddings to fp32 and
    so only raise HF's memory). All HF rows run in one process, one after the other (each
    frees everything before the next; the peak is reset before each row's measured steps).
  - tune: apps/bench/tune-bench, policy full or off, one fresh process per variant (VARIANTS: the fused AdamW
    kernel --fused-adamw, LibTorch's fused RMSNorm TUNE_FUSED_RMS_NORM, the chunked linear cross-entropy --loss
    fused), the NF4 dequantisation by the jiterator kernel (TUNE_NF4_KERNEL=jit) instead of ATen's operators; QLoRA rows:
    --quantize-base nf4 (every projection, double quantisation) on a bf16 base; "+graph" variants capture the whole
    step into a CUDA graph once and replay it (--cuda-graph: one launch per step instead of thousands; their peak is
    the allocator's while the step was captured, whose pool stays reserved between replays: "graph pool" in the log).
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


def hf_quantized_model(torch, config, seq):
    """The random bf16 model saved once (per process) and loaded back quantised to NF4 by bitsandbytes."""
    import tempfile
    from transformers import BitsAndBytesConfig, LlamaForCausalLM
    if not hasattr(hf_quantized_model, "directory"):
        hf_quantized_model.directory = tempfile.mkdtemp(prefix="bench-gpu-hf-")
        with torch.device("cuda"):
            model = LlamaForCausalLM(config).to(torch.bfloat16)
        model.save_pretrained(hf_quantized_model.directory)
        del model
        torch.cuda.empty_cache()
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                      bnb_4bit_compute_dtype=torch.bfloat16)
    return LlamaForCausalLM.from_pretrained(hf_quantized_model.directory, quantization_config=quantization,
                                            dtype=torch.bfloat16, device_map={"": 0},
                                            attn_implementation="sdpa")


def hf_run(torch, config_row, steps):
    """One HF configuration; returns its result dict. Everything it allocates is freed before it returns."""
    import gc
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    seq, batch = config_row["seq"], config_row["batch"]
    config = LlamaConfig(vocab_size=MODEL["vocab"], hidden_size=MODEL["hidden"], num_hidden_layers=MODEL["layers"],
                         num_attention_heads=MODEL["heads"], num_key_value_heads=MODEL["kv_heads"],
                         intermediate_size=MODEL["intermediate"], rope_theta=MODEL["rope_theta"],
                         max_position_embeddings=max(seq, 2048), tie_word_embeddings=True, rms_norm_eps=1e-5,
                         attn_implementation="sdpa")
    if config_row.get("quant") == "nf4":
        model = hf_quantized_model(torch, config, seq)
    else:
        with torch.device("cuda"):  # initialised on the GPU: seconds, not the CPU's minute
            model = LlamaForCausalLM(config)
    if config_row["lora"]:
        from peft import LoraConfig, get_peft_model
        if config_row["base_dtype"] == "bf16" and config_row.get("quant") != "nf4":
            model = model.to(torch.bfloat16)  # as from_pretrained(torch_dtype=bfloat16); peft keeps adapters fp32
        model = get_peft_model(model, LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=0.0,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj"]))
    if config_row["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    # fused=True: HF Trainer's default optimizer (optim="adamw_torch_fused").
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0, fused=True)
    ids = torch.randint(0, MODEL["vocab"], (batch, seq), device="cuda")
    labels = torch.randint(0, MODEL["vocab"], (batch, seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    try:
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        result = {"tool": "hf", "step_s": statistics.median(times), "step_s_all": times,
                  "peak_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss),
                  "parameters": sum(p.numel() for p in model.parameters()),
                  "trainable_parameters": sum(p.numel() for p in trainable)}
    except torch.OutOfMemoryError as error:
        result = {"error": f"out of memory: {str(error)[:200]}"}
    del model, optimizer, trainable
    gc.collect()
    torch.cuda.empty_cache()
    return result


def hf_worker(args):
    """Every HF configuration of --hf-configs (JSON) in this one process (one import of transformers), in turn;
    prints one JSON line each. The caching allocator's peak is reset before each configuration's measured steps,
    and everything of the previous configuration is freed first, so each peak is its own."""
    import torch
    for config_row in json.loads(args.hf_configs):
        result = hf_run(torch, config_row, args.steps)
        result["config"] = config_row["name"]
        print(json.dumps(result), flush=True)


def run_json_lines(command, env=None):
    completed = subprocess.run(command, capture_output=True, text=True,
                               env={**(env or os.environ), "PYTHONUNBUFFERED": "1"})
    lines = [json.loads(l) for l in completed.stdout.splitlines() if l.startswith("{")]
    if completed.returncode != 0 or not lines:
        return [{"error": f"exit {completed.returncode}: {completed.stderr[-1500:]}"}]
    return lines


def model_flops(seq, batch, lora):
    h, L, i, v = MODEL["hidden"], MODEL["layers"], MODEL["intermediate"], MODEL["vocab"]
    head_dim = h // MODEL["heads"]
    kv = MODEL["kv_heads"] * head_dim
    matmul_params = L * (h * h * 2 + h * kv * 2 + 3 * h * i) + v * h  # q, o, k, v, MLP; lm_head (tied)
    tokens = seq * batch
    dense = (4 if lora else 6) * matmul_params * tokens  # frozen weights: forward + input gradient only
    attention = 12 * L * h * seq * tokens
    return dense + attention


# The rows: (name, full|lora, checkpointing, batch, LoRA base dtype) and tune's variants, each a dict of tune-bench
# settings. 'levers' toggles each lever alone and together on the full fine-tune; the rest run every lever kept.
ALL_ON = {"fused_adamw": "auto", "fused_rms_norm": True, "loss": "plain", "nf4_kernel": "chain"}
VARIANTS = {
    "none": {"fused_adamw": "off", "fused_rms_norm": False, "loss": "plain", "nf4_kernel": "chain"},
    "adamw": {"fused_adamw": "auto", "fused_rms_norm": False, "loss": "plain", "nf4_kernel": "chain"},
    "rmsnorm": {"fused_adamw": "off", "fused_rms_norm": True, "loss": "plain", "nf4_kernel": "chain"},
    "all": ALL_ON,
    "all+chunked_loss": {**ALL_ON, "loss": "fused"},
    "all+nf4_jit": {**ALL_ON, "nf4_kernel": "jit"},
    # The whole step captured into a CUDA graph once and replayed (tune-bench --cuda-graph, train/cuda_graph_step.h).
    "all+graph": {**ALL_ON, "cuda_graph": True},
    "all+chunked_loss+graph": {**ALL_ON, "loss": "fused", "cuda_graph": True},
}
ROWS = [
    ("full-off-b1", "full", False, 1, "fp32", ["none", "adamw", "rmsnorm", "all", "all+chunked_loss", "all+graph"]),
    ("full-off-b4", "full", False, 4, "fp32", ["none", "all", "all+chunked_loss"]),
    ("full-on-b1", "full", True, 1, "fp32", ["all", "all+graph"]),
    ("full-on-b4", "full", True, 4, "fp32", ["all", "all+chunked_loss"]),
    ("lora-off-b1", "lora", False, 1, "bf16", ["all", "all+chunked_loss", "all+graph", "all+chunked_loss+graph"]),
    ("lora-on-b1", "lora", True, 1, "bf16", ["all", "all+chunked_loss", "all+graph", "all+chunked_loss+graph"]),
    ("lora-on-b2", "lora", True, 2, "bf16", ["all", "all+chunked_loss", "all+graph", "all+chunked_loss+graph"]),
    ("lora-on-b4", "lora", True, 4, "bf16", ["all", "all+chunked_loss", "all+graph", "all+chunked_loss+graph"]),
    ("qlora-off-b1", "qlora", False, 1, "bf16", ["all", "all+chunked_loss", "all+nf4_jit"]),
    ("qlora-on-b1", "qlora", True, 1, "bf16", ["all", "all+chunked_loss", "all+nf4_jit", "all+graph"]),
    ("qlora-on-b2", "qlora", True, 2, "bf16", ["all", "all+chunked_loss"]),
    ("qlora-on-b4", "qlora", True, 4, "bf16", ["all", "all+chunked_loss", "all+nf4_jit"]),
]
# Kineto traces of one step (--profile-dir): name -> (mode, checkpointing, batch, variant).
PROFILES = {
    "lora-on-b1-plain": ("lora", True, 1, "all"),
    "lora-on-b1-chunked": ("lora", True, 1, "all+chunked_loss"),
    "full-off-b4-all": ("full", False, 4, "all"),
    "qlora-on-b1-all": ("qlora", True, 1, "all"),
    "qlora-on-b1-jit": ("qlora", True, 1, "all+nf4_jit"),
}


def tune_command(args, mode, checkpointing, batch, base_dtype, variant):
    lora = mode != "full"
    command = [args.tune_bench, "--device", "cuda", "--optimizer", "--tie-embeddings", "--dtype", "bf16",
               "--seq", str(args.seq), "--batch", str(batch), "--steps", str(args.steps), "--warmup", "2",
               "--policy", "full" if checkpointing else "off", "--rope-theta", str(MODEL["rope_theta"]),
               "--layers", str(MODEL["layers"]), "--hidden", str(MODEL["hidden"]), "--heads", str(MODEL["heads"]),
               "--kv-heads", str(MODEL["kv_heads"]), "--intermediate", str(MODEL["intermediate"]),
               "--vocab", str(MODEL["vocab"]), "--lora-rank", str(LORA_RANK if lora else 0),
               "--base-dtype", base_dtype, "--fused-adamw", variant["fused_adamw"], "--loss", variant["loss"]]
    if mode == "qlora":
        command += ["--quantize-base", "nf4"]
    if variant.get("cuda_graph"):
        command.append("--cuda-graph")
    env = {**os.environ, "TUNE_FUSED_RMS_NORM": "1" if variant["fused_rms_norm"] else "0",
           "TUNE_NF4_KERNEL": variant["nf4_kernel"]}
    return command, env


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tune-bench", default="build-cuda/apps/bench/tune-bench")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default="")
    parser.add_argument("--rows", default=",".join(r[0] for r in ROWS if r[1] != "qlora"),
                        help="which rows of ROWS to run (default: all but QLoRA's, which need bitsandbytes)")
    parser.add_argument("--variants", default="",
                        help="run only these of each row's tune variants (comma-separated names of VARIANTS; "
                             "default: all the row lists)")
    parser.add_argument("--profile-dir", default="",
                        help="also write Kineto traces (CPU + GPU kernels) of one step of each of --profiles here")
    parser.add_argument("--profiles", default="lora-on-b1-plain,lora-on-b1-chunked,full-off-b4-all",
                        help="which of PROFILES to trace: " + ",".join(PROFILES))
    parser.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hf-configs", default="[]", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_worker:
        return hf_worker(args)

    import torch
    peak = matmul_peak_tflops()
    print(f"bf16 matmul 8192^3: {peak:.0f} TFLOP/s on {torch.cuda.get_device_name()}", flush=True)
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "matmul_tflops": peak,
               "seq": args.seq, "model": MODEL, "lora_rank": LORA_RANK, "variants": VARIANTS, "rows": []}
    del torch  # this process holds no GPU memory beyond the matmul check's while the workers run
    selected = [r for r in ROWS if r[0] in args.rows.split(",")]

    def summarise(row, label, r, tokens, flops):
        if "error" in r:
            row[label] = r
            print(f"{row['config']} {label}: {r['error'][-300:]}", flush=True)
            return
        step = r["step_s"]
        peak_bytes = r.get("peak_bytes", r.get("tracked_peak_bytes"))
        row[label] = {"step_s": step, "tokens_per_s": tokens / step, "peak_gib": peak_bytes / 2 ** 30,
                      "mfu": flops / step / (peak * 1e12), "raw": r}
        pool = r.get("graph_pool_reserved_bytes")  # a captured step's pool, reserved between replays
        print(f"{row['config']} {label}: {step * 1e3:.1f} ms/step, {tokens / step:.0f} tokens/s, "
              f"peak {peak_bytes / 2 ** 30:.2f} GiB, MFU {row[label]['mfu']:.1%}"
              + (f", graph pool {pool / 2 ** 30:.2f} GiB" if pool else ""), flush=True)

    # HF: every row in one process (one import), first, so the tune runs that follow have the GPU to themselves.
    hf_configs = [{"name": name, "lora": mode != "full", "quant": "nf4" if mode == "qlora" else "none",
                   "checkpointing": ckpt, "batch": batch, "seq": args.seq, "base_dtype": base}
                  for name, mode, ckpt, batch, base, _ in selected]
    hf_results = {r.get("config"): r for r in run_json_lines(
        [sys.executable, __file__, "--hf-worker", "--steps", str(args.steps), "--hf-configs", json.dumps(hf_configs)])}
    for name, mode, ckpt, batch, base, variants in selected:
        lora = mode != "full"
        tokens, flops = args.seq * batch, model_flops(args.seq, batch, lora)
        row = {"config": name, "mode": mode, "lora": lora, "checkpointing": ckpt, "batch": batch, "base_dtype": base,
               "flops_per_step": flops}
        summarise(row, "hf", hf_results.get(name) or hf_results.get(None) or {"error": "no result"}, tokens, flops)
        for variant in variants:
            if args.variants and variant not in args.variants.split(","):
                continue
            command, env = tune_command(args, mode, ckpt, batch, base, VARIANTS[variant])
            summarise(row, "tune:" + variant, run_json_lines(command, env)[-1], tokens, flops)
        results["rows"].append(row)
    if args.profile_dir:
        os.makedirs(args.profile_dir, exist_ok=True)
        for name in [n for n in args.profiles.split(",") if n]:  # --profiles= traces none
            mode, ckpt, batch, variant = PROFILES[name]
            base = "fp32" if mode == "full" else "bf16"
            command, env = tune_command(args, mode, ckpt, batch, base, VARIANTS[variant])
            command[command.index("--steps") + 1] = "1"
            r = run_json_lines(command + ["--profile", os.path.join(args.profile_dir, name + ".json")], env)[-1]
            print(f"profile {name}: {'written' if 'error' not in r else r['error'][-300:]}", flush=True)

    print("\n| config | variant | HF tokens/s | tune tokens/s | x HF | HF peak GiB | tune peak GiB | x HF | HF MFU | "
          "tune MFU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in results["rows"]:
        hf = row.get("hf", {})
        for label, tu in row.items():
            if not label.startswith("tune:"):
                continue
            if "step_s" not in hf or "step_s" not in tu:
                print(f"| {row['config']} | {label[5:]} | failed | | | | | | | |")
                continue
            print(f"| {row['config']} | {label[5:]} | {hf['tokens_per_s']:.0f} | {tu['tokens_per_s']:.0f} | "
                  f"{tu['tokens_per_s'] / hf['tokens_per_s']:.2f} | {hf['peak_gib']:.2f} | {tu['peak_gib']:.2f} | "
                  f"{tu['peak_gib'] / hf['peak_gib']:.2f} | {hf['mfu']:.1%} | {tu['mfu']:.1%} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
