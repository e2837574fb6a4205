"""Writes tests/fixtures/train/*.json: expected values for tune's AdamW, gradient clipping, causal-LM loss and
learning-rate schedules, computed with PyTorch's own implementations (torch.optim.AdamW with foreach=False,
torch.nn.utils.clip_grad_norm_, torch.nn.functional.cross_entropy) and the transformers schedule formulas
written out here. Floats are written as Python floats (exact doubles of the fp32 values), so C++ reads them
back bit for bit.

Run with the interpreter that has torch: .venv/bin/python scripts/make_train_fixtures.py
"""
import json
import math
import os

import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "train")


def tensor_json(t):
    return {"shape": list(t.shape), "values": t.detach().float().reshape(-1).tolist()}


def adamw_fixture():
    gen = torch.Generator().manual_seed(1234)
    shapes = {"layer.weight": [4, 3], "head.weight": [2, 3], "layer.bias": [4], "norm.weight": [3]}
    params = {name: torch.randn(shape, generator=gen).requires_grad_() for name, shape in shapes.items()}
    initial = {name: tensor_json(p) for name, p in params.items()}
    betas, eps = (0.9, 0.95), 1e-8
    groups = [
        {"params": [params["layer.weight"], params["head.weight"]], "weight_decay": 0.1},
        {"params": [params["layer.bias"], params["norm.weight"]], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=betas, eps=eps, foreach=False)
    # (step, name): this parameter gets no gradient at that step, so torch skips it and its step count lags
    skipped = {(4, "layer.bias"), (5, "layer.bias"), (11, "head.weight")}
    steps = []
    for step in range(20):
        lr = 1e-2 * (0.5 + 0.5 * math.cos(step / 3.0))  # varies every step
        grads = {}
        for name, p in params.items():
            if (step, name) in skipped:
                p.grad = None
            else:
                p.grad = torch.randn(p.shape, generator=gen) * (0.1 + step * 0.05)
                grads[name] = tensor_json(p.grad)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        steps.append({"lr": lr, "grads": grads,
                      "params_after": {name: tensor_json(p) for name, p in params.items()}})
    return {"beta1": betas[0], "beta2": betas[1], "eps": eps,
            "groups": [{"names": ["layer.weight", "head.weight"], "weight_decay": 0.1},
                       {"names": ["layer.bias", "norm.weight"], "weight_decay": 0.0}],
            "initial": initial, "steps": steps}


def clip_fixture():
    gen = torch.Generator().manual_seed(99)
    cases = []
    for max_norm in (0.5, 1000.0):  # clipped, and left alone
        params = [torch.zeros(s, requires_grad=True) for s in ([5, 4], [7], [3, 2, 2])]
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        grads_before = [tensor_json(p.grad) for p in params]
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        cases.append({"max_norm": max_norm, "grads_before": grads_before, "norm": float(norm),
                      "grads_after": [tensor_json(p.grad) for p in params]})
    return cases


def loss_fixture():
    gen = torch.Generator().manual_seed(7)
    batch, time, vocab = 2, 6, 11
    logits = torch.randn(batch, time, vocab, generator=gen) * 3
    labels = torch.randint(0, vocab, (batch, time), generator=gen)
    labels[0, 2] = -100
    labels[1, 4:] = -100
    labels[0, 0] = -100  # position 0's label is never scored: shifting drops it

    def reference(lg):
        lg = lg.float().detach().requires_grad_()
        shifted = lg[:, :-1].reshape(-1, vocab)
        target = labels[:, 1:].reshape(-1)
        loss = torch.nn.functional.cross_entropy(shifted, target, ignore_index=-100, reduction="sum")
        loss.backward()
        return loss, lg.grad

    loss, grad = reference(logits)
    logits_bf16 = logits.to(torch.bfloat16)
    loss_bf16, _ = reference(logits_bf16)
    tokens = int((labels[:, 1:] != -100).sum())
    return {"logits": tensor_json(logits), "labels": {"shape": list(labels.shape), "values": labels.reshape(-1).tolist()},
            "loss_sum": float(loss), "grad": tensor_json(grad), "tokens": tokens,
            "logits_bf16": tensor_json(logits_bf16), "loss_sum_bf16": float(loss_bf16)}


def schedule_factor(kind, step, warmup, total, min_ratio):
    """transformers' get_{cosine,linear,constant}_schedule_with_warmup lr_lambda, with the min-lr scaling of
    get_cosine_with_min_lr_schedule_with_warmup; progress is clamped to 1 past total_steps."""
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if kind == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        decay = 1.0 - progress
    return min_ratio + (1.0 - min_ratio) * decay


def schedule_fixture():
    cases = []
    for kind in ("cosine", "linear", "constant"):
        for warmup, total, min_ratio in ((0, 10, 0.0), (3, 20, 0.0), (5, 50, 0.1), (10, 10, 0.0)):
            peak = 3e-4
            points = [0, 1, 2, warmup - 1, warmup, warmup + 1, (warmup + total) // 2, total - 1, total, total + 5]
            points = sorted({s for s in points if s >= 0})
            cases.append({"kind": kind, "peak_lr": peak, "warmup_steps": warmup, "total_steps": total,
                          "min_lr_ratio": min_ratio,
                          "lrs": [[s, peak * schedule_factor(kind, s, warmup, total, min_ratio)] for s in points]})
    # wsd: transformers' own get_wsd_schedule (defaults: linear warmup, cosine decay), read through a scheduler.
    from transformers.optimization import get_wsd_schedule
    for warmup, total, decay, min_ratio in ((0, 10, 4, 0.0), (3, 20, 5, 0.1), (5, 12, 7, 0.0), (2, 30, 28, 0.2)):
        peak = 3e-4
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
        scheduler = get_wsd_schedule(optimizer, num_warmup_steps=warmup, num_decay_steps=decay,
                                     num_training_steps=total, min_lr_ratio=min_ratio)
        lrs = []
        for step in range(total + 3):
            lrs.append([step, scheduler.get_last_lr()[0]])
            optimizer.step()
            scheduler.step()
        cases.append({"kind": "wsd", "peak_lr": peak, "warmup_steps": warmup, "total_steps": total,
                      "min_lr_ratio": min_ratio, "decay_steps": decay, "lrs": lrs})
    return cases


def main():
    os.makedirs(OUT, exist_ok=True)
    fixtures = {"adamw.json": adamw_fixture(), "clip.json": clip_fixture(), "loss.json": loss_fixture(),
                "lr_schedule.json": schedule_fixture()}
    for name, data in fixtures.items():
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(data, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
