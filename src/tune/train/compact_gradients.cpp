// CompactGradients: the post-accumulate-grad hook, and the fp32 gradients made again for the optimizer.
#include "tune/train/compact_gradients.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "tune/precision/exact_bf16.h"

namespace tune::train {

namespace {

class CompactingHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit CompactingHook(CompactGradients* owner) : owner_(owner) {}
  void operator()(const torch::autograd::Variable& param) override { owner_->after_accumulation(param); }

 private:
  CompactGradients* owner_;
};

bool compactable(const torch::Tensor& param) {
  return param.device().is_cpu() && param.scalar_type() == torch::kFloat;
}

}  // namespace

CompactGradients::CompactGradients(const std::vector<torch::Tensor>& params) {
  for (const auto& param : params) {
    if (!compactable(param) || !param.requires_grad()) continue;
    params_.push_back(param);
    entries_.emplace(param.unsafeGetTensorImpl(), Entry{});
    torch::autograd::impl::set_post_acc_grad_hooks(param, std::make_unique<CompactingHook>(this));
  }
}

CompactGradients::~CompactGradients() {
  for (const auto& param : params_) torch::autograd::impl::set_post_acc_grad_hooks(param, nullptr);
}

void CompactGradients::after_accumulation(const torch::Tensor& param) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = entries_.find(param.unsafeGetTensorImpl());
  if (found == entries_.end()) return;
  Entry& entry = found->second;
  torch::Tensor& grad = const_cast<torch::Tensor&>(param).mutable_grad();
  if (!grad.defined() || entry.full) return;
  torch::NoGradGuard no_grad;
  if (entry.compact.defined()) {
    // A second contribution (autograd found grad() empty and stored it alone): old + new in fp32, as autograd's
    // accumulation computes it; the sum need not fit in bf16, so it stays in grad().
    grad = entry.compact.to(torch::kFloat).add_(grad);
    entry.compact = torch::Tensor();
    entry.full = true;
    return;
  }
  if (grad.scalar_type() == torch::kFloat && grad.layout() == torch::kStrided && grad.is_contiguous() &&
      !grad.requires_grad()) {
    torch::Tensor compact = precision::to_bf16_if_exact(grad);
    if (compact.defined()) {
      entry.compact = std::move(compact);
      grad = torch::Tensor();
      return;
    }
  }
  entry.full = true;
}

bool CompactGradients::holds(const torch::Tensor& param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = entries_.find(param.unsafeGetTensorImpl());
  return found != entries_.end() && found->second.compact.defined();
}

torch::Tensor CompactGradients::make(const torch::Tensor& param) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = entries_.find(param.unsafeGetTensorImpl());
  if (found == entries_.end() || !found->second.compact.defined()) return {};
  torch::NoGradGuard no_grad;
  torch::Tensor grad = found->second.compact.to(torch::kFloat);
  // The same multiplication clip_grad_norm applies to grad().
  std::vector<torch::Tensor> one{grad};
  for (double factor : factors_) at::_foreach_mul_(one, factor);
  return grad;
}

void CompactGradients::scale(double factor) {
  std::lock_guard<std::mutex> lock(mutex_);
  factors_.push_back(factor);
}

void CompactGradients::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [impl, entry] : entries_) entry = Entry{};
  factors_.clear();
}

int64_t CompactGradients::held_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t count = 0;
  for (const auto& [impl, entry] : entries_) count += entry.compact.defined() ? 1 : 0;
  return count;
}

int64_t CompactGradients::held_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t bytes = 0;
  for (const auto& [impl, entry] : entries_) bytes += entry.compact.defined() ? entry.compact.nbytes() : 0;
  return bytes;
}

}  // namespace tune::train
