// AdamW written out op by op as torch.optim.AdamW's single-tensor path (torch 1.13), so results agree with it to
// rounding (the fixture test: 1e-6); plus the parameter-group split and gradient-norm clipping used by the step
// loop.
#include "tune/train/adamw.h"

#include "tune/core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace tune::train {

std::vector<ParamGroup> make_param_groups(const std::vector<NamedParameter>& params, double weight_decay) {
  ParamGroup decayed{{}, weight_decay};
  ParamGroup not_decayed{{}, 0.0};
  for (const auto& param : params) {
    if (!param.tensor.requires_grad()) continue;
    (param.tensor.dim() >= 2 ? decayed : not_decayed).params.push_back(param);
  }
  std::vector<ParamGroup> groups;
  if (!decayed.params.empty()) groups.push_back(std::move(decayed));
  if (!not_decayed.params.empty()) groups.push_back(std::move(not_decayed));
  return groups;
}

int64_t adamw_step_temporary_bytes(const AdamWOptions& options, int64_t largest_tensor_elements,
                                   bool low_precision_parameters) {
  const int64_t chunk = options.chunk_elements > 0 ? std::min(options.chunk_elements, largest_tensor_elements)
                                                   : largest_tensor_elements;
  int64_t copies = 2;                                      // sqrt(v), then divided by the bias correction
  if (options.state_dtype != torch::kFloat) copies += 2;   // m and v in fp32
  if (low_precision_parameters) copies += 2;               // the parameter and its gradient in fp32
  return copies * chunk * 4;
}

namespace {

// One AdamW update of a slice: the parameter, its gradient and its moments (any float dtypes), computed in fp32
// exactly as torch.optim.AdamW's single-tensor path, then written back where storage is not fp32.
void update_slice(const torch::Tensor& param, const torch::Tensor& grad, const torch::Tensor& exp_avg,
                  const torch::Tensor& exp_avg_sq, double decay_factor, double beta1, double beta2, double step_size,
                  double bias_correction2_sqrt, double eps) {
  const auto fp32 = [](const torch::Tensor& t) { return t.scalar_type() == torch::kFloat ? t : t.to(torch::kFloat); };
  torch::Tensor p = fp32(param), g = fp32(grad), m = fp32(exp_avg), v = fp32(exp_avg_sq);
  p.mul_(decay_factor);
  m.mul_(beta1).add_(g, 1.0 - beta1);
  v.mul_(beta2).addcmul_(g, g, 1.0 - beta2);
  auto denom = (v.sqrt() / bias_correction2_sqrt).add_(eps);
  p.addcdiv_(m, denom, -step_size);
  for (const auto& [stored, computed] : {std::pair{param, p}, std::pair{exp_avg, m}, std::pair{exp_avg_sq, v}}) {
    if (!stored.is_same(computed)) stored.copy_(computed);
  }
}

}  // namespace

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : groups_(std::move(groups)), options_(options) {
  if (options_.state_dtype != torch::kFloat && options_.state_dtype != torch::kBFloat16) {
    throw Error(fmt::format("AdamW: state dtype {} is not supported (fp32 or bf16)",
                            c10::toString(options_.state_dtype)));
  }
  std::set<std::string> names;
  torch::NoGradGuard no_grad;
  for (const auto& group : groups_) {
    for (const auto& param : group.params) {
      if (!names.insert(param.name).second) {
        throw Error(fmt::format("AdamW: parameter '{}' appears twice; each parameter must be in one group once",
                                param.name));
      }
      // Allocated up front rather than at the first step (torch's way; the values are the same zeros) so the
      // memory report at start shows the optimizer's real footprint and an out-of-memory happens before step 1.
      auto state_options = param.tensor.options().dtype(options_.state_dtype).requires_grad(false);
      exp_avg_.push_back(torch::zeros(param.tensor.sizes(), state_options));
      exp_avg_sq_.push_back(torch::zeros(param.tensor.sizes(), state_options));
      param_steps_.push_back(0);
      params_.push_back(param.tensor);
    }
  }
}

bool adamw_uses_fused_kernel(const AdamWOptions& options, torch::ScalarType param_dtype, const torch::Device& device) {
  // The fused kernel keeps the moments in the parameter's dtype: fp32 parameters with fp32 moments only (bf16
  // moments under fp32 masters are tune's own approximation, which the sliced path computes).
  if (options.kernel == AdamWKernel::sliced || param_dtype != torch::kFloat || options.state_dtype != torch::kFloat) {
    return false;
  }
  // automatic and fused alike: on the CPU too, where its one vectorised pass over each tensor made the Latte-S/2
  // step ~40-50 ms (2-3%) faster than the op-by-op path (whose MKL sqrt alone is 2.4x the hardware one, and 6x
  // that on subnormal second moments; docs/BENCHMARKS.md).
  return device.is_cuda() || device.is_cpu();
}

void AdamW::step(double lr, const HeldGradients* held) {
  torch::NoGradGuard no_grad;
  const double beta1 = options_.beta1;
  const double beta2 = options_.beta2;
  if (device_steps_.size() != param_steps_.size()) device_steps_.assign(param_steps_.size(), torch::Tensor());
  size_t index = 0;
  for (const auto& group : groups_) {
    std::vector<size_t> fused;  // parameters of this group that the fused kernel updates, in one call per device
    for (const auto& named : group.params) {
      const size_t i = index++;
      const torch::Tensor& param = named.tensor;
      const bool is_held = !param.grad().defined() && held != nullptr && held->holds(param);
      // As torch: no grad, no update, and the step count does not advance.
      if (!param.grad().defined() && !is_held) continue;
      const int64_t step = ++param_steps_[i];
      // A held gradient is made in fp32 (CompactGradients holds fp32 parameters' gradients only).
      const bool fp32_dense_grad = is_held || (param.grad().scalar_type() == param.scalar_type() &&
                                               !param.grad().is_sparse());
      if (adamw_uses_fused_kernel(options_, param.scalar_type(), param.device()) && fp32_dense_grad) {
        fused.push_back(i);
        continue;
      }
      const torch::Tensor grad_in = is_held ? held->make(param) : param.grad();
      const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
      const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
      const double step_size = lr / bias_correction1;
      const double bias_correction2_sqrt = std::sqrt(bias_correction2);
      const double decay_factor = 1.0 - lr * group.weight_decay;
      const int64_t numel = param.numel();
      const int64_t chunk = options_.chunk_elements;
      // Elementwise arithmetic, so slices compute what the whole tensor would (to the last bit except, at most, where
      // a vector kernel's scalar tail falls, as the whole tensor's split over threads already does); the slices bound
      // the temporaries. Non-contiguous tensors (none that tune makes) are updated whole.
      const bool sliced = chunk > 0 && numel > chunk && param.is_contiguous() && grad_in.is_contiguous();
      if (!sliced) {
        update_slice(param, grad_in, exp_avg_[i], exp_avg_sq_[i], decay_factor, beta1, beta2, step_size,
                     bias_correction2_sqrt, options_.eps);
        continue;
      }
      const torch::Tensor flat[] = {param.view(-1), grad_in.view(-1), exp_avg_[i].view(-1), exp_avg_sq_[i].view(-1)};
      for (int64_t start = 0; start < numel; start += chunk) {
        const int64_t length = std::min(chunk, numel - start);
        update_slice(flat[0].narrow(0, start, length), flat[1].narrow(0, start, length),
                     flat[2].narrow(0, start, length), flat[3].narrow(0, start, length), decay_factor, beta1, beta2,
                     step_size, bias_correction2_sqrt, options_.eps);
      }
    }
    if (!fused.empty()) fused_update(fused, lr, group.weight_decay, held);
  }
  ++steps_;
}

void AdamW::fused_update(const std::vector<size_t>& indices, double lr, double weight_decay,
                         const HeldGradients* held) {
  // One call per device: the kernel's lists must share a device and dtype (all fp32 here). Held gradients are made
  // kHeldGradientBatchBytes at a time, one call per batch: the kernel updates each tensor on its own, so the
  // batches compute what one call would.
  std::map<std::string, std::vector<size_t>> by_device;
  for (size_t i : indices) by_device[exp_avg_[i].device().str()].push_back(i);
  std::vector<std::vector<size_t>> batches;
  for (const auto& [device, members] : by_device) {
    int64_t made_bytes = 0;
    batches.emplace_back();
    for (size_t i : members) {
      if (held != nullptr && made_bytes >= kHeldGradientBatchBytes) {
        batches.emplace_back();
        made_bytes = 0;
      }
      batches.back().push_back(i);
      if (!parameter_at(i).grad().defined()) made_bytes += parameter_at(i).numel() * 4;
    }
  }
  for (const auto& members : batches) {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (size_t i : members) {
      const torch::Tensor& param = parameter_at(i);
      torch::Tensor& device_step = device_steps_[i];
      // param_steps_ was advanced already; the kernel reads the step it is taking.
      if (!device_step.defined()) {
        device_step = torch::full({}, static_cast<double>(param_steps_[i]), param.options().dtype(torch::kFloat));
      } else {
        steps.push_back(device_step);
      }
      params.push_back(param);
      grads.push_back(param.grad().defined() ? param.grad() : held->make(param));
      exp_avgs.push_back(exp_avg_[i]);
      exp_avg_sqs.push_back(exp_avg_sq_[i]);
    }
    if (!steps.empty()) at::_foreach_add_(steps, 1.0);
    steps.clear();
    for (size_t i : members) steps.push_back(device_steps_[i]);
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, options_.beta1,
                      options_.beta2, weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

bool AdamW::can_step_on_device() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& param = params_[i];
    if (!adamw_uses_fused_kernel(options_, param.scalar_type(), param.device())) return false;
  }
  return true;
}

void AdamW::step_on_device(const torch::Tensor& lr, const torch::Tensor& skip) {
  if (device_steps_.size() != param_steps_.size()) device_steps_.assign(param_steps_.size(), torch::Tensor());
  size_t index = 0;
  for (const auto& group : groups_) {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (const auto& named : group.params) {
      const size_t i = index++;
      const torch::Tensor& param = named.tensor;
      if (!param.grad().defined() || !adamw_uses_fused_kernel(options_, param.scalar_type(), param.device()) ||
          param.grad().scalar_type() != param.scalar_type()) {
        throw Error(fmt::format("AdamW::step_on_device: parameter '{}' {}", named.name,
                                param.grad().defined() ? "does not take the fused kernel" : "has no gradient"));
      }
      torch::Tensor& device_step = device_steps_[i];
      if (!device_step.defined()) {
        device_step = torch::full({}, static_cast<double>(param_steps_[i]), param.options().dtype(torch::kFloat));
      }
      params.push_back(param);
      grads.push_back(param.grad());
      exp_avgs.push_back(exp_avg_[i]);
      exp_avg_sqs.push_back(exp_avg_sq_[i]);
      steps.push_back(device_step);
    }
    if (params.empty()) continue;
    // The kernel reads the step it is taking; a skipped step takes it back (torch.optim's fused path with a
    // GradScaler does the same).
    at::_foreach_add_(steps, 1.0);
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, options_.beta1,
                      options_.beta2, group.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false,
                      /*grad_scale=*/std::nullopt, skip);
    at::_foreach_add_(steps, skip, -1.0);
  }
}

void AdamW::count_device_step(bool applied) {
  if (!applied) return;
  for (auto& count : param_steps_) ++count;
  ++steps_;
}

void AdamW::zero_grad() {
  for (auto& group : groups_) {
    for (auto& param : group.params) param.tensor.mutable_grad() = torch::Tensor();
  }
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state_tensors() const {
  // The moments are returned as the live tensors (as torch's state_dict does): write them out before the next
  // step() or clone them.
  std::vector<std::pair<std::string, torch::Tensor>> state;
  size_t i = 0;
  for (const auto& group : groups_) {
    for (const auto& param : group.params) {
      state.emplace_back(param.name + ".exp_avg", exp_avg_[i]);
      state.emplace_back(param.name + ".exp_avg_sq", exp_avg_sq_[i]);
      state.emplace_back(param.name + ".step", torch::tensor(param_steps_[i], torch::kLong));
      ++i;
    }
  }
  return state;
}

namespace {

const torch::Tensor& find_entry(const std::map<std::string, torch::Tensor>& entries, const std::string& name) {
  auto it = entries.find(name);
  if (it == entries.end()) {
    throw InputError(fmt::format("optimizer state: entry '{}' is missing (checkpoint from a different model or "
                                 "trainable-parameter set?)",
                                 name));
  }
  return it->second;
}

torch::Tensor load_moment(const std::map<std::string, torch::Tensor>& entries, const std::string& name,
                          const torch::Tensor& param, torch::ScalarType state_dtype) {
  const auto& tensor = find_entry(entries, name);
  if (!tensor.is_floating_point() || tensor.sizes() != param.sizes()) {
    throw InputError(fmt::format("optimizer state: entry '{}' has dtype {} and shape [{}], expected a float tensor "
                                 "of shape [{}] like its parameter",
                                 name, c10::toString(tensor.scalar_type()), fmt::join(tensor.sizes(), ", "),
                                 fmt::join(param.sizes(), ", ")));
  }
  // A copy, so the restored optimizer never shares storage with whoever handed the state in. Moments saved in the
  // other dtype (a run resumed with optimizer.state_dtype changed) are converted.
  return tensor.to(param.device(), state_dtype, /*non_blocking=*/false, /*copy=*/true).contiguous();
}

int64_t load_step(const std::map<std::string, torch::Tensor>& entries, const std::string& name) {
  const auto& tensor = find_entry(entries, name);
  if (tensor.numel() != 1) {
    throw InputError(fmt::format("optimizer state: entry '{}' should hold one step count, has {} values", name,
                                 tensor.numel()));
  }
  const double value = tensor.to(torch::kDouble).item<double>();
  if (!(value >= 0) || value != std::floor(value)) {
    throw InputError(fmt::format("optimizer state: entry '{}' = {} is not a step count (a whole number >= 0)", name,
                                 value));
  }
  return static_cast<int64_t>(value);
}

}  // namespace

void AdamW::load_state_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::map<std::string, torch::Tensor> entries;
  for (const auto& [name, tensor] : state) {
    if (!entries.emplace(name, tensor).second) {
      throw InputError(fmt::format("optimizer state: entry '{}' appears twice", name));
    }
  }
  // Everything is validated into fresh vectors first, so a failed load leaves the optimizer as it was.
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;
  std::vector<int64_t> param_steps;
  std::set<std::string> used;
  for (const auto& group : groups_) {
    for (const auto& param : group.params) {
      for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".step"}) used.insert(param.name + suffix);
      exp_avg.push_back(load_moment(entries, param.name + ".exp_avg", param.tensor, options_.state_dtype));
      exp_avg_sq.push_back(load_moment(entries, param.name + ".exp_avg_sq", param.tensor, options_.state_dtype));
      param_steps.push_back(load_step(entries, param.name + ".step"));
    }
  }
  for (const auto& [name, tensor] : entries) {
    if (!used.count(name)) {
      throw InputError(fmt::format("optimizer state: entry '{}' matches no trainable parameter (checkpoint from a "
                                   "different model or trainable-parameter set?)",
                                   name));
    }
  }
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  param_steps_ = std::move(param_steps);
  device_steps_.clear();  // remade from the restored counts at the next fused step
  // The optimizer-wide count is not stored separately; every step() that updates anything advances some
  // parameter, so the largest per-parameter count equals it unless whole steps had no gradients at all.
  steps_ = param_steps_.empty() ? 0 : *std::max_element(param_steps_.begin(), param_steps_.end());
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
  return bytes;
}

torch::Tensor clip_grad_norm_on_device(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& param : params) {
    if (param.grad().defined()) grads.push_back(param.grad());
  }
  if (grads.empty()) return {};
  // As clip_grad_norm: per-tensor fp32 norms in one launch, their squares summed in fp64.
  const torch::Tensor norms = torch::stack(at::_foreach_norm(grads, 2, torch::kFloat));
  const torch::Tensor norm = norms.to(torch::kDouble).square().sum().sqrt();
  if (max_norm > 0) {
    // clip_grad_norm multiplies only where the factor is below 1 and the norm finite; 1 elsewhere changes no bit.
    torch::Tensor factor = (max_norm / (norm + 1e-6)).clamp_max(1.0);
    factor = torch::where(torch::isfinite(norm), factor, torch::ones_like(factor));
    std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
    for (const auto& grad : grads) by_dtype[grad.scalar_type()].push_back(grad);
    for (auto& [dtype, members] : by_dtype) at::_foreach_mul_(members, factor.to(dtype));
  }
  return norm;
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                      const std::function<double(double)>& sum_over_ranks, HeldGradients* held) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  std::vector<size_t> grad_slots, held_slots;  // where each norm goes: the parameters' order
  std::vector<torch::Tensor> held_params;
  for (const auto& param : params) {
    if (param.grad().defined()) {
      grad_slots.push_back(grad_slots.size() + held_slots.size());
      grads.push_back(param.grad());
    } else if (held != nullptr && held->holds(param)) {
      held_slots.push_back(grad_slots.size() + held_slots.size());
      held_params.push_back(param);
    }
  }
  // Per-tensor norms accumulate in fp32 (as torch's), in one multi-tensor launch (torch's foreach clipping); their
  // squares in fp64, in the parameters' order; one .item() keeps it to a single device sync on CUDA. Held
  // gradients are made a batch at a time for their norms (the same per-tensor norm as over grad()).
  double squared = 0.0;
  std::vector<torch::Tensor> norms(grad_slots.size() + held_slots.size());
  if (!grads.empty()) {
    std::vector<torch::Tensor> grad_norms = at::_foreach_norm(grads, 2, torch::kFloat);
    for (size_t k = 0; k < grad_norms.size(); ++k) norms[grad_slots[k]] = std::move(grad_norms[k]);
  }
  for (size_t begin = 0; begin < held_params.size();) {
    std::vector<torch::Tensor> made;
    int64_t made_bytes = 0;
    size_t end = begin;
    for (; end < held_params.size() && made_bytes < kHeldGradientBatchBytes; ++end) {
      made.push_back(held->make(held_params[end]));
      made_bytes += made.back().nbytes();
    }
    std::vector<torch::Tensor> made_norms = at::_foreach_norm(made, 2, torch::kFloat);
    for (size_t k = 0; k < made_norms.size(); ++k) norms[held_slots[begin + k]] = std::move(made_norms[k]);
    begin = end;
  }
  if (!norms.empty()) {
    const torch::Device device = norms.front().device();
    for (auto& norm : norms) {
      if (norm.device() != device) norm = norm.to(device);
    }
    squared = torch::stack(norms).to(torch::kDouble).square().sum().item<double>();
  }
  // Every rank takes part, even one holding no gradient: the sum is a collective.
  if (sum_over_ranks) squared = sum_over_ranks(squared);
  const double norm = std::sqrt(squared);
  // A non-finite norm is returned untouched rather than turning every gradient into NaN; the caller (loss
  // scaler, logging) decides what to do with the step.
  if (max_norm > 0 && std::isfinite(norm)) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0 && !grads.empty()) at::_foreach_mul_(grads, coefficient);
    if (coefficient < 1.0 && !held_params.empty()) held->scale(coefficient);
  }
  return norm;
}

}  // namespace tune::train
