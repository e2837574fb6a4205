#!/usr/bin/env python3
"""Reference schedules and sampling runs from Hugging Face diffusers' own DDIMScheduler,
DPMSolverMultistepScheduler (DDPM and flow sigmas) and FlowMatchEulerDiscreteScheduler, for tune's scheduler_config
reader and sampler (read by
tests/diffusion/test_scheduler_config.cpp), and a diffusers pipeline directory (model_index.json, read by
tests/io/test_pipeline_index.cpp).

    .venv/bin/python scripts/make_diffusers_scheduler_fixture.py --out DIR     (deterministic; run by CTest)

Writes, under DIR:
  latte1_pipeline/        Latte-1's model_index.json (LattePipeline: DDIMScheduler, T5EncoderModel, T5Tokenizer,
                          LatteTransformer3DModel, AutoencoderKL) with empty component folders, and the scheduler's
                          scheduler_config.json. Written whether or not diffusers is installed.
  configs/NAME/scheduler_config.json
                          one per case below: Latte-1's DDIM file as published (written by hand, then loaded by
                          diffusers to check it is accepted), the others written by diffusers' save_config.
  cases.json              {"cases": [{name, class_name, timestep_counts, trajectory_counts, eta_one_counts}],
                           "eta_one_seed": ..., "x_shape": [...], "aspect_ratio_bins": {"bins": [{sample_size,
                           height, width, bin: [h, w]}], "resizes": [{index, height, width}]}}: SanaPipeline's
                           resolution binning (classify_height_width_bin over its four tables, and
                           resize_and_crop_tensor of reference.safetensors' resize/I/in to resize/I/out)
  reference.safetensors   x_T (float64); per case NAME:
                            NAME/betas, NAME/alphas_cumprod           float32, diffusers' tables
                            NAME/timesteps/N                           set_timesteps(N); scheduler.timesteps: int64,
                                                                       float32 for FlowMatchEuler
                            NAME/sigmas/N                              float32, DPM-Solver and FlowMatchEuler:
                                                                       scheduler.sigmas
                            NAME/trajectory/N/float64, .../float32     [N + 1, *x_shape]: the sample passed to the
                                                                       model at each step, then the result
                            NAME/eta_one/N                             float64 DDIM with eta 1 (noise from a
                                                                       torch.Generator seeded eta_one_seed)
The model is the toy eps (or v, or x_0, or flow velocity) predictor  0.9 * tanh(x) + 1e-4 * t  (t the timestep
as a float, per sample), which the C++ test repeats with the same LibTorch ops. The flow cases (Sana's
DPM-Solver config with flow_shift 3 and 1, and FlowMatchEuler with shift 1 and 3) have their own step counts.
The pipeline's loop is diffusers' own: x = x_T; for t in scheduler.timesteps: x = scheduler.step(model(x, t), t,
x).prev_sample.

If diffusers is not installed, writes DIR/SKIPPED with the reason (beside latte1_pipeline/) and exits 0; the
scheduler tests then exit 77 (reported skipped by CTest, never passed).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_output  # noqa: E402
import safetensors_io  # noqa: E402

X_SHAPE = [2, 4, 2, 3, 3]  # [B, C, F, H, W], a small video latent
X_SEED = 20240823
ETA_ONE_SEED = 1234
TIMESTEP_COUNTS = [1, 2, 3, 7, 13, 25, 50, 100, 250]
TRAJECTORY_COUNTS = [50, 25, 7]
# Sana samples with 20 steps; 1000 (every training timestep) makes shifted flow sigmas repeat a truncated timestep.
FLOW_TIMESTEP_COUNTS = [1, 2, 3, 7, 13, 20, 50, 250, 1000]
FLOW_TRAJECTORY_COUNTS = [20, 7]

# Sana's scheduler/scheduler_config.json (Efficient-Large-Model/Sana_1600M_512px_diffusers), the keys that differ
# from DPMSolverMultistepScheduler's defaults spelled out.
SANA_DPM_FLOW = dict(algorithm_type="dpmsolver++", solver_order=2, solver_type="midpoint",
                     prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                     final_sigmas_type="zero", lower_order_final=True, timestep_spacing="linspace",
                     num_train_timesteps=1000)

# Latte-1's scheduler/scheduler_config.json (maxin-cn/Latte-1, after the commit that replaced DPMSolverMultistep),
# with the keys diffusers writes for DDIMScheduler; variance_type is DDPMScheduler's, kept by diffusers as a hidden
# key. The exact published file may carry more (or fewer) of the default-valued keys.
LATTE1_SCHEDULER = {
    "_class_name": "DDIMScheduler",
    "_diffusers_version": "0.30.0.dev0",
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "beta_start": 0.0001,
    "clip_sample": False,
    "clip_sample_range": 1.0,
    "dynamic_thresholding_ratio": 0.995,
    "num_train_timesteps": 1000,
    "prediction_type": "epsilon",
    "rescale_betas_zero_snr": False,
    "sample_max_value": 1.0,
    "set_alpha_to_one": True,
    "steps_offset": 0,
    "thresholding": False,
    "timestep_spacing": "leading",
    "trained_betas": None,
    "variance_type": "learned_range",
}

LATTE1_MODEL_INDEX = {
    "_class_name": "LattePipeline",
    "_diffusers_version": "0.30.0.dev0",
    "scheduler": ["diffusers", "DDIMScheduler"],
    "text_encoder": ["transformers", "T5EncoderModel"],
    "tokenizer": ["transformers", "T5Tokenizer"],
    "transformer": ["diffusers", "LatteTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}

# name -> (class, constructor arguments); None: LATTE1_SCHEDULER as written above.
CASES = {
    "latte1_ddim": ("DDIMScheduler", None),
    "ddim_trailing": ("DDIMScheduler", dict(clip_sample=False, timestep_spacing="trailing")),
    "ddim_linspace": ("DDIMScheduler", dict(clip_sample=False, timestep_spacing="linspace")),
    "ddim_offset_final_alpha_zero": ("DDIMScheduler", dict(clip_sample=False, steps_offset=1,
                                                             set_alpha_to_one=False)),
    "ddim_scaled_linear_v": ("DDIMScheduler", dict(clip_sample=False, beta_schedule="scaled_linear",
                                                     beta_start=0.00085, beta_end=0.012,
                                                     prediction_type="v_prediction", timestep_spacing="trailing",
                                                     set_alpha_to_one=False)),
    "ddim_cosine_sample": ("DDIMScheduler", dict(clip_sample=False, beta_schedule="squaredcos_cap_v2",
                                                   prediction_type="sample", timestep_spacing="linspace")),
    # Latte-1's earlier scheduler: DPM-Solver++ 2M with diffusers' defaults (linspace, midpoint, final sigma 0)
    "dpm_latte1_earlier": ("DPMSolverMultistepScheduler", dict()),
    "dpm_heun_leading": ("DPMSolverMultistepScheduler", dict(solver_type="heun", timestep_spacing="leading",
                                                             steps_offset=1)),
    "dpm_sigma_min_trailing_v": ("DPMSolverMultistepScheduler", dict(final_sigmas_type="sigma_min",
                                                                     timestep_spacing="trailing",
                                                                     prediction_type="v_prediction")),
    "dpm_clipped_euler_final": ("DPMSolverMultistepScheduler", dict(lambda_min_clipped=-4.5, euler_at_final=True,
                                                                    final_sigmas_type="sigma_min")),
    "dpm_first_order_sample": ("DPMSolverMultistepScheduler", dict(solver_order=1, prediction_type="sample",
                                                                   beta_schedule="squaredcos_cap_v2")),
    "dpm_flow_sana": ("DPMSolverMultistepScheduler", SANA_DPM_FLOW),
    "dpm_flow_shift1": ("DPMSolverMultistepScheduler", dict(SANA_DPM_FLOW, flow_shift=1.0)),
    # the final sigma from the DDPM betas (as diffusers takes it), heun, no lower-order final step
    "dpm_flow_sigma_min_heun": ("DPMSolverMultistepScheduler", dict(SANA_DPM_FLOW, final_sigmas_type="sigma_min",
                                                                    solver_type="heun", lower_order_final=False)),
    "flow_euler_shift1": ("FlowMatchEulerDiscreteScheduler", dict(shift=1.0)),
    "flow_euler_shift3": ("FlowMatchEulerDiscreteScheduler", dict(shift=3.0)),
}
FLOW_CASES = {"dpm_flow_sana", "dpm_flow_shift1", "dpm_flow_sigma_min_heun", "flow_euler_shift1",
              "flow_euler_shift3"}


def toy_model(x, t):
    """0.9 tanh(x) + 1e-4 t, t broadcast per sample (as the C++ test computes it)."""
    steps = t.expand(x.shape[0]).to(x.dtype).reshape(-1, *([1] * (x.dim() - 1)))
    return torch.tanh(x) * 0.9 + steps * 1e-4


def write_pipeline(out):
    pipeline = os.path.join(out, "latte1_pipeline")
    for component in ("scheduler", "text_encoder", "tokenizer", "transformer", "vae"):
        os.makedirs(os.path.join(pipeline, component))
    with open(os.path.join(pipeline, "model_index.json"), "w") as f:
        json.dump(LATTE1_MODEL_INDEX, f, indent=2, sort_keys=True)
    with open(os.path.join(pipeline, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump(LATTE1_SCHEDULER, f, indent=2, sort_keys=True)


def make_scheduler(diffusers, name, class_name, arguments, out):
    cls = getattr(diffusers, class_name)
    directory = os.path.join(out, "configs", name)
    if arguments is None:
        os.makedirs(directory)
        with open(os.path.join(directory, "scheduler_config.json"), "w") as f:
            json.dump(LATTE1_SCHEDULER, f, indent=2, sort_keys=True)
        scheduler = cls.from_pretrained(directory)
        assert scheduler.config.variance_type == "learned_range", "diffusers dropped the hidden variance_type"
    else:
        scheduler = cls(**arguments)
        scheduler.save_config(directory)
    return cls, directory


def run(cls, directory, steps, x_T, eta=None, generator=None):
    scheduler = cls.from_pretrained(directory)
    scheduler.set_timesteps(steps)
    x = x_T.clone()
    states = []
    for t in scheduler.timesteps:
        states.append(x)
        extra = {} if eta is None else dict(eta=eta, generator=generator)
        x = scheduler.step(toy_model(x, t), t, x, **extra).prev_sample
    states.append(x)
    return torch.stack(states)


def aspect_ratio_bins(tensors):
    """SanaPipeline's resolution binning: the bin diffusers picks for requests of many sizes, per transformer
    sample_size (its table), and resize_and_crop_tensor on a random image (tensors["resize/N"])."""
    from diffusers.image_processor import PixArtImageProcessor
    from diffusers.pipelines.pixart_alpha.pipeline_pixart_alpha import ASPECT_RATIO_512_BIN, ASPECT_RATIO_1024_BIN
    from diffusers.pipelines.pixart_alpha.pipeline_pixart_sigma import ASPECT_RATIO_2048_BIN
    from diffusers.pipelines.sana.pipeline_sana import ASPECT_RATIO_4096_BIN
    tables = {16: ASPECT_RATIO_512_BIN, 32: ASPECT_RATIO_1024_BIN, 64: ASPECT_RATIO_2048_BIN, 128: ASPECT_RATIO_4096_BIN}
    generator = torch.Generator().manual_seed(5)
    requests = [(int(h), int(w)) for h, w in torch.randint(16, 4097, (300, 2), generator=generator).tolist()]
    requests += [(512, 512), (1024, 600), (200, 560), (100, 2000), (2000, 100)]
    bins = []
    for sample_size, table in tables.items():
        # The table's own sizes map to themselves too.
        for height, width in requests + [(int(h), int(w)) for h, w in table.values()]:
            binned = PixArtImageProcessor.classify_height_width_bin(height, width, ratios=table)
            bins.append(dict(sample_size=sample_size, height=height, width=width, bin=list(binned)))
    resizes = []
    for i, (source, target) in enumerate([((288, 832), (200, 560)), ((768, 1280), (600, 1024)), ((64, 64), (64, 64)),
                                          ((96, 32), (50, 30))]):
        image = torch.randn(1, 3, *source, generator=generator)
        tensors[f"resize/{i}/in"] = image
        tensors[f"resize/{i}/out"] = PixArtImageProcessor.resize_and_crop_tensor(image, target[1], target[0])
        resizes.append(dict(index=i, height=target[0], width=target[1]))
    return dict(bins=bins, resizes=resizes)


def main():
    out = fixture_output.fresh_output_dir(__doc__.split("\n")[0])
    write_pipeline(out)
    if fixture_output.skipped_without(out, "make_diffusers_scheduler_fixture", "diffusers"):
        return
    import diffusers

    torch.set_num_threads(1)
    x_T = torch.randn(X_SHAPE, generator=torch.Generator().manual_seed(X_SEED), dtype=torch.float64)
    tensors = {"x_T": x_T}
    cases = []
    for name, (class_name, arguments) in CASES.items():
        cls, directory = make_scheduler(diffusers, name, class_name, arguments, out)
        scheduler = cls.from_pretrained(directory)
        if class_name != "FlowMatchEulerDiscreteScheduler":  # it has no DDPM process
            tensors[f"{name}/betas"] = scheduler.betas.clone()
            tensors[f"{name}/alphas_cumprod"] = scheduler.alphas_cumprod.clone()
        timestep_counts = FLOW_TIMESTEP_COUNTS if name in FLOW_CASES else TIMESTEP_COUNTS
        trajectory_counts = FLOW_TRAJECTORY_COUNTS if name in FLOW_CASES else TRAJECTORY_COUNTS
        for steps in timestep_counts:
            scheduler = cls.from_pretrained(directory)
            scheduler.set_timesteps(steps)
            tensors[f"{name}/timesteps/{steps}"] = scheduler.timesteps.clone()
            if class_name != "DDIMScheduler":
                tensors[f"{name}/sigmas/{steps}"] = scheduler.sigmas.clone()
        for steps in trajectory_counts:
            for dtype, label in ((torch.float64, "float64"), (torch.float32, "float32")):
                tensors[f"{name}/trajectory/{steps}/{label}"] = run(cls, directory, steps, x_T.to(dtype))
        eta_one_counts = []
        if class_name == "DDIMScheduler" and name in ("latte1_ddim", "ddim_offset_final_alpha_zero"):
            eta_one_counts = [25]
            generator = torch.Generator().manual_seed(ETA_ONE_SEED)
            tensors[f"{name}/eta_one/25"] = run(cls, directory, 25, x_T, eta=1.0, generator=generator)
        cases.append(dict(name=name, class_name=class_name, timestep_counts=timestep_counts,
                          trajectory_counts=trajectory_counts, eta_one_counts=eta_one_counts))

    bins = aspect_ratio_bins(tensors)
    safetensors_io.save(os.path.join(out, "reference.safetensors"),
                        {k: v.contiguous() for k, v in tensors.items()})
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(dict(cases=cases, eta_one_seed=ETA_ONE_SEED, x_shape=X_SHAPE, aspect_ratio_bins=bins,
                       diffusers_version=diffusers.__version__), f, indent=2)
    print(f"make_diffusers_scheduler_fixture: {len(cases)} cases, {len(tensors)} tensors in {out}")


if __name__ == "__main__":
    main()
