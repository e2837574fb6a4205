// A scheduler config turned into a sampling run: the DDIM process for ddim_sample_loop, or a loop over
// SchedulerStepper's DPM-Solver++ or flow-matching Euler steps.
#include "tune/diffusion/scheduler_sampler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cmath>

#include "tune/core/error.h"
#include "tune/diffusion/dpm_solver.h"

namespace tune::diffusion {
namespace {

std::string describe(const SchedulerConfig& config) {
  return config.source.empty() ? config.class_name : fmt::format("{} ({})", config.class_name, config.source.string());
}

// alpha_bar at the original timesteps t [B], shaped to broadcast against x, in x's dtype and on its device.
torch::Tensor alpha_bar_at(const torch::Tensor& table, const torch::Tensor& t, const torch::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[0] = t.size(0);
  return table.to(x.device()).index_select(0, t.to(x.device(), torch::kLong)).to(x.scalar_type()).reshape(shape);
}

torch::Tensor sample_stepwise(const SchedulerConfig& config, int64_t num_inference_steps, const ModelFn& model,
                              const torch::Tensor& x_T, const SamplerOptions& options) {
  const char* refused = options.eta != 0.0           ? "eta other than 0"
                        : options.guidance           ? "gradient guidance"
                        : options.clip_denoised      ? "clip_denoised"
                                                     : nullptr;
  if (refused) {
    throw UsageError(fmt::format("{}: {} is not implemented for {} sampling; use a DDIMScheduler config",
                                 describe(config), refused,
                                 config.kind == SchedulerKind::flow_match_euler ? "flow-matching Euler"
                                                                                : "DPM-Solver++"));
  }
  SchedulerStepper stepper(config, num_inference_steps);
  auto x = x_T.to(compute_dtype(x_T.scalar_type()));
  const int64_t total = stepper.num_steps();
  for (int64_t i = 0; i < total; ++i) {
    const auto t = stepper.model_timesteps(i, x.size(0), x.device());
    torch::Tensor output;
    {
      torch::NoGradGuard no_grad;
      output = model(x, t).to(x.scalar_type());
    }
    x = stepper.step(i, x, output).sample;
    if (options.on_step) options.on_step(i + 1, total, std::llround(stepper.timesteps()[i].item<double>()));
  }
  return x;
}

}  // namespace

GaussianDiffusion scheduler_diffusion(const SchedulerConfig& config, int64_t num_inference_steps) {
  if (config.kind != SchedulerKind::ddim) {
    throw UsageError(fmt::format("{}: a DDIM process needs a DDIMScheduler config", describe(config)));
  }
  const auto alphas_cumprod = scheduler_alphas_cumprod(config);
  const auto descending = scheduler_timesteps(config, num_inference_steps);
  // diffusers' DDIM steps back by T // n from any timestep, past 0 to its final alpha_bar.
  const int64_t stride = config.num_train_timesteps / num_inference_steps;
  const double final_alpha_bar = config.set_alpha_to_one ? 1.0 : alphas_cumprod[0];
  std::vector<int64_t> timestep_map(descending.rbegin(), descending.rend());
  std::vector<double> alpha_bar, alpha_bar_prev;
  for (int64_t t : timestep_map) {
    alpha_bar.push_back(alphas_cumprod[static_cast<size_t>(t)]);
    alpha_bar_prev.push_back(t - stride >= 0 ? alphas_cumprod[static_cast<size_t>(t - stride)] : final_alpha_bar);
  }
  ProcessOptions process;
  process.mean_type = config.prediction_type == "sample" ? ModelMeanType::StartX : ModelMeanType::Epsilon;
  process.var_type = ModelVarType::FixedSmall;  // DDIM never reads the variance; the output is x-shaped
  process.channel_dim = 1;                      // only checked against x's rank; any layout [B, ...] works
  return GaussianDiffusion(ScheduleTables::from_alphas_cumprod(alpha_bar, alpha_bar_prev), process,
                           std::move(timestep_map), config.num_train_timesteps);
}

ModelFn scheduler_process_model(const SchedulerConfig& config, ModelFn model) {
  if (config.prediction_type != "v_prediction") return model;
  const auto table = torch::tensor(scheduler_alphas_cumprod(config), torch::kDouble);
  return [model = std::move(model), table](const torch::Tensor& x, const torch::Tensor& t) {
    const auto v = model(x, t);
    const auto alpha_bar = alpha_bar_at(table, t, v);
    return torch::sqrt(alpha_bar) * v + torch::sqrt(1.0 - alpha_bar) * x.to(v.scalar_type());
  };
}

SchedulerStepper::SchedulerStepper(const SchedulerConfig& config, int64_t num_inference_steps) : config_(config) {
  if (config.kind == SchedulerKind::ddim) {
    throw UsageError(fmt::format("{}: DDIM steps through scheduler_diffusion (ddim_sample_loop), not a stepper",
                                 describe(config)));
  }
  sigmas_ = scheduler_sigmas(config, num_inference_steps);
  timesteps_ = scheduler_model_timesteps(config, num_inference_steps);
  if (config.kind == SchedulerKind::dpm_solver_multistep) {
    DpmSolverOptions options;
    options.order = config.solver_order;
    options.second_order = config.solver_type == "heun" ? DpmSecondOrder::heun : DpmSecondOrder::midpoint;
    options.lower_order_final = config.lower_order_final;
    options.euler_at_final = config.euler_at_final;
    options.flow_sigmas = config.use_flow_sigmas;
    dpm_solver_.emplace(sigmas_, options);
  }
}

torch::Tensor SchedulerStepper::model_timesteps(int64_t step, int64_t batch, torch::Device device) const {
  return timesteps_.index({step}).expand({batch}).to(device).contiguous();
}

torch::Tensor SchedulerStepper::predicted_x0(int64_t step, const torch::Tensor& x, const torch::Tensor& output) const {
  if (config_.prediction_type == "flow_prediction") return x - sigma(step) * output;  // v = eps - x_0
  if (config_.prediction_type == "sample") return output;
  const double alpha = dpm_solver_->alpha(step), scale = dpm_solver_->noise_scale(step);
  if (config_.prediction_type == "epsilon") return (x - scale * output) / alpha;
  return alpha * x - scale * output;  // v_prediction
}

SchedulerStepper::Result SchedulerStepper::step(int64_t step, const torch::Tensor& x,
                                                const torch::Tensor& model_output) {
  if (step != next_step_ || step >= num_steps()) {
    throw Error(fmt::format("{}: step {} taken, expected step {} of {}", describe(config_), step, next_step_,
                            num_steps()));
  }
  if (model_output.sizes() != x.sizes()) {
    throw Error(fmt::format("{}: the model returned shape {} for a sample of shape {}", describe(config_),
                            fmt::join(model_output.sizes(), "x"), fmt::join(x.sizes(), "x")));
  }
  Result result;
  result.predicted_x0 = predicted_x0(step, x, model_output.to(x.scalar_type()));
  if (dpm_solver_) {
    result.sample = dpm_solver_->step(step, x.detach(), result.predicted_x0.detach());
  } else {
    torch::NoGradGuard no_grad;  // Euler: x' = x + (sigma_next - sigma) v
    result.sample = x.detach() + (sigma(step + 1) - sigma(step)) * model_output.detach().to(x.scalar_type());
  }
  ++next_step_;
  return result;
}

torch::Tensor sample_with_scheduler(const SchedulerConfig& config, int64_t num_inference_steps, const ModelFn& model,
                                    const torch::Tensor& x_T, at::Generator generator,
                                    const SamplerOptions& options) {
  if (config.kind != SchedulerKind::ddim) return sample_stepwise(config, num_inference_steps, model, x_T, options);
  return ddim_sample_loop(scheduler_diffusion(config, num_inference_steps), scheduler_process_model(config, model),
                          x_T, std::move(generator), options);
}

}  // namespace tune::diffusion
