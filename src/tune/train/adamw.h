// AdamW (decoupled weight decay, Loshchilov & Hutter), identical in its update to torch.optim.AdamW
// (amsgrad=False, maximize=False). State is named, so it saves to safetensors and restores exactly. The moments are
// fp32 (torch's choice) or, to save memory, bf16 (state_dtype): then each update reads them into fp32, computes as
// the fp32 optimizer does, and rounds them back, an approximation torch.optim does not make (the rounded moments
// carry 8 significant bits). The update runs in chunks of at most chunk_elements, so its temporaries stay a few
// MiB rather than two copies of the largest tensor (1 GiB for a 128k x 2048 embedding).
//
// The update kernel (`kernel`): LibTorch's fused multi-tensor AdamW (`at::_fused_adamw_`, the kernel of
// torch.optim.AdamW(fused=True), and of HF Trainer's default `adamw_torch_fused`) updates every parameter of a group
// in a few launches, one pass over each tensor and no temporaries; the sliced op-by-op path above costs about nine
// passes and a launch per op and tensor. `automatic` (as `fused`) takes the fused kernel for fp32 parameters with
// fp32 moments on CUDA and on the CPU (LibTorch's CPU kernel: HF Trainer's default `adamw_torch_fused` there too),
// and the sliced path for the rest (bf16 moments or parameters); `sliced` never uses it. Both compute
// torch.optim.AdamW's update (to fp32 rounding: the fused kernel takes the bias corrections in fp32, the sliced path
// in double) and keep the same named state, so a checkpoint resumes under either.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tune::train {

struct NamedParameter {
  std::string name;
  torch::Tensor tensor;  // requires_grad
};

struct ParamGroup {
  std::vector<NamedParameter> params;
  double weight_decay = 0.0;
};

enum class AdamWKernel { automatic, fused, sliced };

// Gradients held elsewhere than param.grad() (train/compact_gradients.h keeps exact bf16 copies of them). Where a
// parameter's grad() is undefined and a HeldGradients holds one, AdamW::step and clip_grad_norm make it in fp32,
// a few MiB at a time, and drop it after use: the arithmetic is the one over param.grad(), bit for bit.
class HeldGradients {
 public:
  virtual ~HeldGradients() = default;
  virtual bool holds(const torch::Tensor& param) const = 0;
  // The fp32 gradient param.grad() would have held, times the factors scale() was given since clear().
  virtual torch::Tensor make(const torch::Tensor& param) const = 0;
  // clip_grad_norm's coefficient: applied to each held gradient when it is made (as clipping multiplies grad()).
  virtual void scale(double factor) = 0;
  // Drops every held gradient (the end of a step, beside AdamW::zero_grad).
  virtual void clear() = 0;
};

// Gradients made at once by AdamW::step and clip_grad_norm from a HeldGradients (about this many fp32 bytes).
constexpr int64_t kHeldGradientBatchBytes = int64_t{16} << 20;

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  torch::ScalarType state_dtype = torch::kFloat;  // kFloat or kBFloat16 (optimizer.state_dtype)
  int64_t chunk_elements = int64_t{1} << 22;      // elements updated at once; <= 0: each tensor whole
  AdamWKernel kernel = AdamWKernel::automatic;     // optimizer.fused: auto | true | false
};

// Whether step() takes the fused kernel for a parameter of this dtype on this device under these options.
bool adamw_uses_fused_kernel(const AdamWOptions& options, torch::ScalarType param_dtype, const torch::Device& device);

// fp32 temporaries of one update chunk (AdamW::step): sqrt(v) and its scaled copy, plus the fp32 copies of bf16
// moments or of a low-precision parameter and gradient; none under the fused kernel (callers that know the device
// pass 0 then). The memory planner counts this.
int64_t adamw_step_temporary_bytes(const AdamWOptions& options, int64_t largest_tensor_elements,
                                   bool low_precision_parameters);

// Splits trainable parameters into decayed (matrices) and non-decayed (norm weights, biases: every tensor with
// fewer than 2 dimensions) groups, as HF Trainer and torchtune do. Frozen parameters are left out entirely.
std::vector<ParamGroup> make_param_groups(const std::vector<NamedParameter>& params, double weight_decay);

class AdamW {
 public:
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options);

  // One update with learning rate `lr`; parameters whose grad is undefined (and that `held` does not hold) are
  // skipped (as PyTorch does).
  void step(double lr, const HeldGradients* held = nullptr);
  void zero_grad();  // sets grads to undefined (set_to_none) to free memory
  int64_t steps_taken() const { return steps_; }

  // The update with nothing decided on the host, so a CUDA graph can capture it (train/cuda_graph_step.h): the
  // learning rate is a float32 scalar on the parameters' device, and where `skip` (a float32 scalar there) is 1
  // the parameters, moments and step counts stay as they were (torch.optim's fused `found_inf`). Every trained
  // parameter must have a gradient and take the fused kernel (can_step_on_device). The host's step counts are not
  // touched: count_device_step does that once the outcome is known.
  void step_on_device(const torch::Tensor& lr, const torch::Tensor& skip);
  // Whether every parameter would take the fused kernel (step_on_device's condition, gradients aside).
  bool can_step_on_device() const;
  // Advances the host's step counts (what checkpoints store) after a step_on_device that was `applied`.
  void count_device_step(bool applied);

  // Named state ("<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step") for checkpoints.
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors() const;
  // Restores from state_tensors() output; throws tune::InputError naming the missing or mis-shaped entry.
  void load_state_tensors(const std::vector<std::pair<std::string, torch::Tensor>>& state);
  int64_t state_bytes() const;  // memory held by optimizer state

  const std::vector<ParamGroup>& groups() const { return groups_; }

 private:
  std::vector<ParamGroup> groups_;
  AdamWOptions options_;
  int64_t steps_ = 0;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // aligned with parameters in group order
  std::vector<int64_t> param_steps_;                 // per parameter, as torch.optim counts per param
  // The fused kernel reads each parameter's step from a float32 scalar on the parameter's device (as torch.optim's
  // fused path keeps it); made from param_steps_ at first use and after a state load, then advanced beside it.
  std::vector<torch::Tensor> device_steps_;
  std::vector<torch::Tensor> params_;  // the parameters in group order (handles on the same tensors as groups_)

  const torch::Tensor& parameter_at(size_t index) const { return params_[index]; }

  void fused_update(const std::vector<size_t>& indices, double lr, double weight_decay,
                    const HeldGradients* held);
};

// clip_grad_norm's arithmetic with nothing read on the host (a CUDA graph can capture it): returns the norm as a
// float64 scalar on the gradients' device and scales them by min(1, max_norm / (norm + 1e-6)) where max_norm > 0
// and the norm is finite (the same factors, so the same gradients, as clip_grad_norm). No gradients: an undefined
// tensor. One process only (no sum over ranks).
torch::Tensor clip_grad_norm_on_device(const std::vector<torch::Tensor>& params, double max_norm);

// L2 norm of all gradients (float64 accumulation); when max_norm > 0 and the norm exceeds it, scales gradients
// by max_norm / (norm + 1e-6) as torch.nn.utils.clip_grad_norm_. Returns the norm before clipping.
// `sum_over_ranks`, when set, sums the squared norm over the ranks of a run whose gradients are sharded (each rank
// holds a disjoint part), so every rank clips by the same global norm. Gradients `held` are measured as made and
// scaled through held->scale.
double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm,
                      const std::function<double(double)>& sum_over_ranks = {}, HeldGradients* held = nullptr);

}  // namespace tune::train
