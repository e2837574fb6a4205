#!/usr/bin/env python3
"""The PyTorch side of the checkpointing benchmark: an independent eager Llama (RMSNorm, rotate-half RoPE, GQA,
SwiGLU; torch.nn default init, as tune's random model) trained for a few steps with torch.utils.checkpoint per
block, under torch.autocast('cpu', bfloat16). Prints one JSON line with the fields tune-bench prints.

Run each configuration in its own process: peak RSS (ru_maxrss) is per process. Needs Debian's python3-torch
(.venv/bin/python). Used by scripts/bench_checkpointing.sh.
"""
import argparse
import inspect
import json
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


def current_rss_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return -1


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        groups = self.heads // self.kv_heads
        if groups > 1:  # Hugging Face's repeat_kv
            k = k[:, :, None].expand(b, self.kv_heads, groups, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
            v = v[:, :, None].expand(b, self.kv_heads, groups, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
        # Eager attention as Hugging Face's LlamaAttention writes it (1.13 has no scaled_dot_product_attention):
        # softmax in fp32, cast back for the value product.
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        probs = F.softmax(scores.float() + mask, dim=-1).to(q.dtype)
        context = torch.matmul(probs, v)
        return self.o_proj(context.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.self_attn = Attention(hidden, heads, kv_heads)
        self.mlp = MLP(hidden, intermediate)
        self.input_layernorm = RMSNorm(hidden)
        self.post_attention_layernorm = RMSNorm(hidden)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab, args.hidden)
        self.layers = nn.ModuleList(
            DecoderLayer(args.hidden, args.heads, args.kv_heads or args.heads, args.intermediate)
            for _ in range(args.layers))
        self.norm = RMSNorm(args.hidden)
        self.lm_head = nn.Linear(args.hidden, args.vocab, bias=False)
        head_dim = args.hidden // args.heads
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim)),
                             persistent=False)
        self.checkpointed = [False] * args.layers
        self.segment_size = 0  # > 0: policy sqrt, segments of this many blocks, one checkpoint each

    def forward(self, input_ids):
        b, t = input_ids.shape
        positions = torch.arange(t).unsqueeze(0).expand(b, t).float()
        freqs = positions.unsqueeze(-1) * self.inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)
        mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)[None, None]
        x = self.embed_tokens(input_ids)
        if self.segment_size > 0 and torch.is_grad_enabled():
            # tune's sqrt: each segment of blocks is one checkpoint keeping only its input (torch.utils.checkpoint's
            # checkpoint_sequential does the same, except that it runs its last segment without a checkpoint).
            for first in range(0, len(self.layers), self.segment_size):
                segment = self.layers[first:first + self.segment_size]

                def run_segment(h, cos, sin, mask, segment=segment):
                    for layer in segment:
                        h = layer(h, cos, sin, mask)
                    return h
                x = torch.utils.checkpoint.checkpoint(run_segment, x, cos, sin, mask, **_CHECKPOINT_KWARGS)
            return self.lm_head(self.norm(x)).float()
        for layer, checkpointed in zip(self.layers, self.checkpointed):
            if checkpointed and torch.is_grad_enabled():
                x = checkpoint_block(layer, x, cos, sin, mask)
            else:
                x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x)).float()


_CHECKPOINT_KWARGS = {}
if "use_reentrant" in inspect.signature(torch.utils.checkpoint.checkpoint).parameters:
    _CHECKPOINT_KWARGS["use_reentrant"] = False


def checkpoint_block(layer, *args):
    return torch.utils.checkpoint.checkpoint(layer, *args, **_CHECKPOINT_KWARGS)


def checkpoint_layout(policy, layers, k):
    if policy == "off":
        return [False] * layers
    if policy == "full":
        return [True] * layers
    if policy == "every_k":
        return [i % k == 0 for i in range(layers)]
    if policy == "sqrt":  # tune's sqrt: segments of ceil(sqrt(L)) blocks, see Llama.segment_size
        return [True] * layers
    raise ValueError(f"policy '{policy}' has no PyTorch equivalent here; choose off, full, every_k or sqrt")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=0)
    parser.add_argument("--intermediate", type=int, default=688)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--policy", default="full")
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--optimizer", action="store_true",
                        help="an AdamW update in each step (torch.optim.AdamW's default kernel), as tune-bench --optimizer")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (inductor; compiled during the warm-up steps)")
    parser.add_argument("--profile", help="also profile one step after the timed ones: its Chrome trace (torch.profiler, "
                                          "CPU) is written here, as tune-bench --profile; bench_profile_summary.py sums both")
    args = parser.parse_args()

    result = {"tool": "pytorch", "torch": torch.__version__, "policy": args.policy, "k": args.k,
              "layers": args.layers, "seq": args.seq, "batch": args.batch, "hidden": args.hidden,
              "heads": args.heads, "kv_heads": args.kv_heads or args.heads, "intermediate": args.intermediate,
              "vocab": args.vocab, "dtype": args.dtype, "steps": args.steps, "warmup": args.warmup,
              "checkpoint_kwargs": {k: v for k, v in _CHECKPOINT_KWARGS.items()}}
    try:
        layout = checkpoint_layout(args.policy, args.layers, args.k)
    except ValueError as error:
        result["error"] = str(error)
        print(json.dumps(result), flush=True)
        return 3

    torch.set_num_threads(args.threads)
    result["threads"] = torch.get_num_threads()
    torch.manual_seed(args.seed)
    model = Llama(args)
    model.checkpointed = layout
    if args.policy == "sqrt":
        model.segment_size = math.ceil(math.sqrt(args.layers)) if args.layers else 0
    model.train()
    result["compiled"] = args.compile
    if args.compile:
        model = torch.compile(model)
    result["checkpointed_blocks"] = sum(layout)
    input_ids = torch.randint(0, args.vocab, (args.batch, args.seq))
    labels = torch.randint(0, args.vocab, (args.batch, args.seq))
    result["parameter_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if args.optimizer else None
    result["optimizer"] = args.optimizer
    rss_before = current_rss_bytes()

    def step():
        for p in model.parameters():  # zeroed in place, as tune-bench does (set_to_none would free them)
            if p.grad is not None:
                p.grad.zero_()
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            logits = model(input_ids)
        scored = logits[:, :-1].float().reshape(-1, args.vocab)
        loss = F.cross_entropy(scored, labels[:, 1:].reshape(-1), reduction="sum")
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        return time.perf_counter() - start, loss.item()

    for _ in range(args.warmup):
        step()
    seconds, loss = [], 0.0
    for _ in range(args.steps):
        elapsed, loss = step()
        seconds.append(elapsed)

    rss_peak = peak_rss_bytes()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as trace:
            step()
        trace.export_chrome_trace(args.profile)
    result.update({
        "step_s": statistics.median(seconds),
        "step_s_min": min(seconds),  # least disturbed by other processes; the driver's ratios use it
        "step_s_all": seconds,
        "tokens_per_s": args.batch * args.seq / statistics.median(seconds),
        "loss_sum": loss,
        # torch 1.13 on CPU keeps no allocator statistics: activation memory is compared through RSS.
        "activation_bytes": None,
        "rss_before_bytes": rss_before,
        "rss_peak_bytes": rss_peak,
        "rss_delta_bytes": rss_peak - rss_before,
    })
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
