"""Writes tests/fixtures/diffusion/diffusion.json: float64 reference values for tune's diffusion layer
(src/tune/diffusion), computed by an independent numpy implementation of the formulas of Latte's diffusion
package (OpenAI improved-diffusion / DiT gaussian_diffusion.py, respace.py, diffusion_utils.py):
beta schedules and derived tables, q_sample, the posterior q(x_{t-1} | x_t, x_0), p_mean_variance for learned-range
and fixed variances, the hybrid training loss (eps MSE + frozen-mean VB term in bits, decoder NLL at t = 0),
timestep respacing, single DDPM / DDIM steps with given noise (with and without a guidance gradient), short
sampling loops whose per-step noise comes from a seeded torch.Generator, and the classifier-free guidance
combination. torch is used only to draw seeded random numbers so the C++ side can reproduce them.

Tensors use Latte's layout [B, F, C, H, W] (channels on dim 2). Floats are written as Python floats (doubles).

Run with the interpreter that has torch: .venv/bin/python scripts/make_diffusion_fixture.py
"""
import json
import math
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "diffusion")
CHANNEL_DIM = 2


def arr(a):
    a = np.asarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "values": [float(v) for v in a.reshape(-1)]}


# ---------------------------------------------------------------------------------------------------------------
# schedules and tables

def linear_betas(steps):
    scale = 1000.0 / steps
    return np.linspace(scale * 1e-4, scale * 0.02, steps, dtype=np.float64)


def cosine_betas(steps, max_beta=0.999):
    def alpha_bar(s):
        return math.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
    return np.array([min(1.0 - alpha_bar((i + 1) / steps) / alpha_bar(i / steps), max_beta) for i in range(steps)],
                    dtype=np.float64)


def tables(betas):
    """Every derived quantity, each element computed from its own definition."""
    n = len(betas)
    abar = np.empty(n)
    running = 1.0
    for i in range(n):
        running *= 1.0 - betas[i]
        abar[i] = running
    abar_prev = np.concatenate([[1.0], abar[:-1]])
    abar_next = np.concatenate([abar[1:], [0.0]])
    post_var = betas * (1.0 - abar_prev) / (1.0 - abar)
    post_log_var = np.log(np.where(np.arange(n) == 0, post_var[1] if n > 1 else post_var[0], post_var))
    return {
        "betas": betas,
        "alphas_cumprod": abar,
        "alphas_cumprod_prev": abar_prev,
        "alphas_cumprod_next": abar_next,
        "sqrt_alphas_cumprod": np.sqrt(abar),
        "sqrt_one_minus_alphas_cumprod": np.sqrt(1.0 - abar),
        "log_one_minus_alphas_cumprod": np.log(1.0 - abar),
        "sqrt_recip_alphas_cumprod": 1.0 / np.sqrt(abar),
        "sqrt_recipm1_alphas_cumprod": np.sqrt((1.0 - abar) / abar),
        "posterior_variance": post_var,
        "posterior_log_variance_clipped": post_log_var,
        "posterior_mean_coef1": betas * np.sqrt(abar_prev) / (1.0 - abar),
        "posterior_mean_coef2": (1.0 - abar_prev) * np.sqrt(1.0 - betas) / (1.0 - abar),
    }


def space(num_timesteps, spec):
    """The kept timesteps, sorted (Latte returns a set; the spaced process walks it in order)."""
    if spec.startswith("ddim"):
        want = int(spec[4:])
        for stride in range(1, num_timesteps):
            kept = list(range(0, num_timesteps, stride))
            if len(kept) == want:
                return kept
        raise ValueError(spec)
    counts = [int(c) for c in spec.split(",")]
    base, extra = divmod(num_timesteps, len(counts))
    kept, start = [], 0
    for i, count in enumerate(counts):
        size = base + (1 if i < extra else 0)
        stride = 1.0 if count <= 1 else (size - 1) / (count - 1)
        position = 0.0
        for _ in range(count):
            kept.append(start + round(position))  # Python's round: halves go to the even neighbour
            position += stride
        start += size
    return sorted(set(kept))


def spaced_betas(base_betas, kept):
    abar = np.cumprod(1.0 - base_betas)
    out, last = [], 1.0
    for i in kept:
        out.append(1.0 - abar[i] / last)
        last = abar[i]
    return np.array(out)


# ---------------------------------------------------------------------------------------------------------------
# per-batch helpers: coefficient [B] broadcast over [B, F, C, H, W]

def at(table, t, ndim):
    return table[t].reshape([-1] + [1] * (ndim - 1))


def split_channels(output):
    c = output.shape[CHANNEL_DIM] // 2
    return output[:, :, :c], output[:, :, c:]


def predict_xstart(tab, x_t, t, eps):
    abar = at(tab["alphas_cumprod"], t, x_t.ndim)
    return (x_t - np.sqrt(1.0 - abar) * eps) / np.sqrt(abar)


def posterior(tab, x0, x_t, t):
    n = x_t.ndim
    abar, abar_prev, beta = (at(tab[k], t, n) for k in ("alphas_cumprod", "alphas_cumprod_prev", "betas"))
    mean = (np.sqrt(abar_prev) * beta * x0 + np.sqrt(1.0 - beta) * (1.0 - abar_prev) * x_t) / (1.0 - abar)
    var = np.broadcast_to(at(tab["posterior_variance"], t, n), x_t.shape)
    log_var = np.broadcast_to(at(tab["posterior_log_variance_clipped"], t, n), x_t.shape)
    return mean, var, log_var


def p_mean_var(tab, output, x, t, var_type, clip):
    n = x.ndim
    if var_type == "learned_range":
        eps, v = split_channels(output)
        lo = at(tab["posterior_log_variance_clipped"], t, n)
        hi = np.log(at(tab["betas"], t, n))
        log_var = lo + (v + 1.0) / 2.0 * (hi - lo)
    else:
        eps = output
        if var_type == "fixed_small":
            log_var = np.broadcast_to(at(tab["posterior_log_variance_clipped"], t, n), x.shape)
        else:  # fixed_large: beta_t, with the posterior variance at t = 0
            large = tab["betas"].copy()
            large[0] = tab["posterior_variance"][1]
            log_var = np.broadcast_to(np.log(at(large, t, n)), x.shape)
    x0 = predict_xstart(tab, x, t, eps)
    if clip:
        x0 = np.clip(x0, -1.0, 1.0)
    mean, _, _ = posterior(tab, x0, x, t)
    return {"mean": mean, "variance": np.exp(log_var), "log_variance": log_var, "pred_xstart": x0}


def gaussian_kl(m1, lv1, m2, lv2):
    return 0.5 * (lv2 - lv1 - 1.0 + np.exp(lv1 - lv2) + (m1 - m2) ** 2 / np.exp(lv2))


def cdf_approx(z):
    return 0.5 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))


def discretized_nll(x, mean, log_scale):
    inv = np.exp(-log_scale)
    upper = cdf_approx(inv * (x - mean + 1.0 / 255.0))
    lower = cdf_approx(inv * (x - mean - 1.0 / 255.0))
    logp = np.where(x < -0.999, np.log(np.maximum(upper, 1e-12)),
                    np.where(x > 0.999, np.log(np.maximum(1.0 - lower, 1e-12)),
                             np.log(np.maximum(upper - lower, 1e-12))))
    return -logp


def per_sample_mean(a):
    return a.reshape(a.shape[0], -1).mean(axis=1)


def hybrid_loss(tab, output, x0, noise, t, rescale_steps=None):
    x_t = at(tab["sqrt_alphas_cumprod"], t, x0.ndim) * x0 + at(tab["sqrt_one_minus_alphas_cumprod"], t, x0.ndim) * noise
    eps, _ = split_channels(output)
    mse = per_sample_mean((noise - eps) ** 2)
    true_mean, _, true_log_var = posterior(tab, x0, x_t, t)
    p = p_mean_var(tab, output, x_t, t, "learned_range", clip=False)
    kl = per_sample_mean(gaussian_kl(true_mean, true_log_var, p["mean"], p["log_variance"])) / math.log(2.0)
    nll = per_sample_mean(discretized_nll(x0, p["mean"], 0.5 * p["log_variance"])) / math.log(2.0)
    vb = np.where(t == 0, nll, kl)
    if rescale_steps is not None:
        vb = vb * rescale_steps / 1000.0
    return {"x_t": x_t, "mse": mse, "vb": vb, "kl": kl, "decoder_nll": nll, "loss": mse + vb}


def ddpm_step(tab, output, x, t, noise, clip, gradient=None):
    p = p_mean_var(tab, output, x, t, "learned_range", clip)
    mean = p["mean"] if gradient is None else p["mean"] + p["variance"] * gradient
    keep = (t != 0).astype(np.float64).reshape([-1] + [1] * (x.ndim - 1))
    return mean + keep * np.exp(0.5 * p["log_variance"]) * noise, p["pred_xstart"]


def ddim_step(tab, output, x, t, noise, eta, clip, gradient=None):
    n = x.ndim
    p = p_mean_var(tab, output, x, t, "learned_range", clip)
    abar = at(tab["alphas_cumprod"], t, n)
    abar_prev = at(tab["alphas_cumprod_prev"], t, n)
    x0 = p["pred_xstart"]
    eps = (x - np.sqrt(abar) * x0) / np.sqrt(1.0 - abar)
    if gradient is not None:  # score conditioning (Song et al.): shift eps, re-derive x0
        eps = eps - np.sqrt(1.0 - abar) * gradient
        x0 = (x - np.sqrt(1.0 - abar) * eps) / np.sqrt(abar)
    sigma = eta * np.sqrt((1.0 - abar_prev) / (1.0 - abar) * (1.0 - abar / abar_prev))
    keep = (t != 0).astype(np.float64).reshape([-1] + [1] * (n - 1))
    sample = np.sqrt(abar_prev) * x0 + np.sqrt(1.0 - abar_prev - sigma ** 2) * eps + keep * sigma * noise
    return sample, x0


def toy_model(x, original_t):
    """A deterministic stand-in model both sides can evaluate: eps = 0.1 x + t/1000, v = 0.5 tanh(x)."""
    tt = original_t.reshape([-1] + [1] * (x.ndim - 1)).astype(np.float64)
    return np.concatenate([0.1 * x + tt / 1000.0, 0.5 * np.tanh(x)], axis=CHANNEL_DIM)


# ---------------------------------------------------------------------------------------------------------------

def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240607)
    steps = 1000
    fixture = {"num_timesteps": steps, "channel_dim": CHANNEL_DIM}

    probe = [0, 1, 2, 10, 99, 250, 500, 750, 998, 999]
    fixture["schedules"] = {}
    for name, betas in (("linear", linear_betas(steps)), ("squaredcos_cap_v2", cosine_betas(steps))):
        tab = tables(betas)
        fixture["schedules"][name] = {"t": probe, **{k: [float(v[i]) for i in probe] for k, v in tab.items()}}
    fixture["linear_100_steps"] = {"t": [0, 50, 99], "betas": [float(linear_betas(100)[i]) for i in (0, 50, 99)]}

    tab = tables(linear_betas(steps))
    shape = [4, 2, 3, 2, 2]  # B, F, C, H, W
    out_shape = [4, 2, 6, 2, 2]
    t = np.array([0, 1, 500, 999])
    x0 = rng.uniform(-1.0, 1.0, shape)
    x0.reshape(-1)[[0, 5, 17, 40, 77]] = -1.0  # the decoder NLL's edge bins
    x0.reshape(-1)[[3, 22, 61, 90]] = 1.0
    noise = rng.standard_normal(shape)
    output = np.concatenate([rng.standard_normal(shape), rng.uniform(-1.0, 1.0, shape)], axis=CHANNEL_DIM)
    x_t = at(tab["sqrt_alphas_cumprod"], t, 5) * x0 + at(tab["sqrt_one_minus_alphas_cumprod"], t, 5) * noise
    mean, var, log_var = posterior(tab, x0, x_t, t)
    fixture["process"] = {
        "t": t.tolist(), "x_start": arr(x0), "noise": arr(noise), "model_output": arr(output), "x_t": arr(x_t),
        "posterior_mean": arr(mean), "posterior_variance": arr(var), "posterior_log_variance": arr(log_var),
        "pred_xstart_from_eps": arr(predict_xstart(tab, x_t, t, split_channels(output)[0])),
    }
    for label, var_type, clip, out in (("learned_range", "learned_range", False, output),
                                       ("learned_range_clipped", "learned_range", True, output),
                                       ("fixed_small", "fixed_small", False, split_channels(output)[0]),
                                       ("fixed_large", "fixed_large", False, split_channels(output)[0])):
        p = p_mean_var(tab, out, x_t, t, var_type, clip)
        fixture["process"]["p_mean_variance_" + label] = {k: arr(v) for k, v in p.items()}

    losses = hybrid_loss(tab, output, x0, noise, t)
    fixture["loss"] = {k: arr(v) for k, v in losses.items() if k != "x_t"}

    fixture["respacing"] = {}
    for spec, total in (("ddim10", 1000), ("25", 1000), ("250", 1000), ("10,15,20", 300), ("ddim50", 1000)):
        kept = space(total, spec)
        entry = {"num_timesteps": total, "timestep_map": kept}
        if total == 1000 and spec in ("ddim10", "25"):
            entry["tables"] = {k: v.tolist() for k, v in tables(spaced_betas(linear_betas(1000), kept)).items()}
        fixture["respacing"][spec] = entry

    # spaced "25": hybrid loss with RESCALED_MSE scaling (vb * 25 / 1000)
    kept25 = space(1000, "25")
    tab25 = tables(spaced_betas(linear_betas(1000), kept25))
    t25 = np.array([0, 3, 12, 24])
    l25 = hybrid_loss(tab25, output, x0, noise, t25, rescale_steps=25)
    fixture["loss_spaced25_rescaled"] = {"t": t25.tolist(), "mse": arr(l25["mse"]), "vb": arr(l25["vb"]),
                                         "loss": arr(l25["loss"])}

    # single steps on spaced processes, with the timesteps the model must receive
    step_noise = rng.standard_normal(shape)
    gradient = rng.standard_normal(shape) * 0.3
    x = rng.standard_normal(shape)
    kept10 = space(1000, "ddim10")
    tab10 = tables(spaced_betas(linear_betas(1000), kept10))
    t10 = np.array([9, 5, 1, 0])
    steps_fx = {"x": arr(x), "noise": arr(step_noise), "gradient": arr(gradient), "model_output": arr(output)}
    for eta in (0.0, 0.7):
        s, x0p = ddim_step(tab10, output, x, t10, step_noise, eta, clip=False)
        steps_fx[f"ddim_eta{eta}"] = {"spacing": "ddim10", "t": t10.tolist(), "model_t": [kept10[i] for i in t10],
                                      "eta": eta, "sample": arr(s), "pred_xstart": arr(x0p)}
    s, x0p = ddim_step(tab10, output, x, t10, step_noise, 0.7, clip=False, gradient=gradient)
    steps_fx["ddim_guided"] = {"spacing": "ddim10", "t": t10.tolist(), "eta": 0.7, "sample": arr(s),
                               "pred_xstart": arr(x0p)}
    t25s = np.array([24, 10, 1, 0])
    for clip in (False, True):
        s, x0p = ddpm_step(tab25, output, x, t25s, step_noise, clip)
        steps_fx["ddpm" + ("_clipped" if clip else "")] = {
            "spacing": "25", "t": t25s.tolist(), "model_t": [kept25[i] for i in t25s], "clip": clip,
            "sample": arr(s), "pred_xstart": arr(x0p)}
    s, x0p = ddpm_step(tab25, output, x, t25s, step_noise, False, gradient=gradient)
    steps_fx["ddpm_guided"] = {"spacing": "25", "t": t25s.tolist(), "sample": arr(s), "pred_xstart": arr(x0p)}
    fixture["steps"] = steps_fx

    # loops: x_T given, per-step noise drawn in float64 from torch.Generator().manual_seed(seed), one randn of
    # the sample's shape per step (also at the last step, whose noise is not used), as the sampler does
    loop_shape = [2, 2, 3, 2, 2]
    x_T = rng.standard_normal(loop_shape)
    seed = 31
    loops = {"x_T": arr(x_T), "seed": seed}
    for kind, spec, eta in (("ddpm", "ddim10", None), ("ddim", "ddim10", 0.5)):
        kept = space(1000, spec)
        tb = tables(spaced_betas(linear_betas(1000), kept))
        gen = torch.Generator().manual_seed(seed)
        cur = x_T.copy()
        for i in reversed(range(len(kept))):
            tt = np.full(loop_shape[0], i)
            out = toy_model(cur, np.array([kept[j] for j in tt]))
            nz = torch.randn(loop_shape, generator=gen, dtype=torch.float64).numpy()
            if kind == "ddpm":
                cur, _ = ddpm_step(tb, out, cur, tt, nz, clip=False)
            else:
                cur, _ = ddim_step(tb, out, cur, tt, nz, eta, clip=False)
        loops[kind] = {"spacing": spec, "eta": eta, "sample": arr(cur)}
    fixture["loops"] = loops

    # classifier-free guidance: rows [cond..., uncond...]; eps channels guided, variance from the cond half
    cfg_scale = 4.0
    doubled = rng.standard_normal([4, 2, 6, 2, 2])
    cond, uncond = doubled[:2], doubled[2:]
    c = 3
    guided_eps = uncond[:, :, :c] + cfg_scale * (cond[:, :, :c] - uncond[:, :, :c])
    fixture["cfg"] = {"scale": cfg_scale, "model_output": arr(doubled),
                      "combined": arr(np.concatenate([guided_eps, cond[:, :, c:]], axis=CHANNEL_DIM))}

    # uniform timestep sampling: torch.randint with a seeded generator, as Latte's train.py draws t
    gen = torch.Generator().manual_seed(7)
    fixture["timestep_sampler"] = {"seed": 7, "num_timesteps": 1000, "batch": 8,
                                   "t": torch.randint(0, 1000, (8,), generator=gen).tolist()}

    path = os.path.join(OUT, "diffusion.json")
    with open(path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
