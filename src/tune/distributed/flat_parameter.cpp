// full_shard's flat parameter (see flat_parameter.h).
#include "tune/distributed/flat_parameter.h"

#include <c10/core/StorageImpl.h>
#include <fmt/format.h>

#include "tune/core/error.h"

namespace tune::distributed {

FlatParameter::FlatParameter(std::string name, std::vector<std::pair<std::string, torch::Tensor>> params,
                             ProcessGroup& group)
    : name_(std::move(name)), params_(std::move(params)), group_(group) {
  if (params_.empty()) throw Error("internal: a flat parameter needs at least one tensor");
  const auto& first = params_.front().second;
  trainable_ = first.requires_grad();
  matrices_ = first.dim() >= 2;
  std::vector<torch::Tensor> pieces;
  for (const auto& [param_name, param] : params_) {
    if (param.scalar_type() != first.scalar_type() || param.device() != first.device() ||
        param.requires_grad() != trainable_ || (param.dim() >= 2) != matrices_) {
      throw Error(fmt::format("internal: flat parameter {} mixes kinds of tensors ({})", name_, param_name));
    }
    numel_ += param.numel();
    pieces.push_back(param.detach().reshape({-1}));
  }
  const int64_t ranks = group_.size();
  shard_numel_ = (numel_ + ranks - 1) / ranks;
  torch::NoGradGuard no_grad;
  full_ = torch::zeros({shard_numel_ * ranks}, first.options().requires_grad(false));
  full_.narrow(0, 0, numel_).copy_(torch::cat(pieces));
  pieces.clear();
  shard_ = full_.narrow(0, group_.rank() * shard_numel_, shard_numel_).clone();
  if (trainable_) shard_.set_requires_grad(true);
  int64_t offset = 0;
  for (auto& [param_name, param] : params_) {
    // The parameter keeps its TensorImpl (module, optimizer-free, autograd identity) and now points into full_.
    param.set_data(full_.narrow(0, offset, param.numel()).view(param.sizes()));
    offset += param.numel();
  }
  state_ = State::gathered;
  release();
}

void FlatParameter::set_storage_bytes(size_t bytes) {
  c10::StorageImpl* storage = full_.storage().unsafeGetStorageImpl();
  if (bytes == 0) {
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, full_.device()));
  } else {
    storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  }
  storage->set_nbytes(bytes);
}

void FlatParameter::start_gather() {
  if (state_ != State::released) return;
  set_storage_bytes(static_cast<size_t>(full_.numel()) * full_.element_size());
  gather_input_ = shard_.detach();
  gathering_ = group_.all_gather_async(full_, gather_input_, "gather of " + name_);
  state_ = State::gathering;
}

void FlatParameter::gather() {
  start_gather();
  if (state_ != State::gathering) return;
  gathering_.wait();
  gathering_ = PendingCollective();
  gather_input_ = torch::Tensor();
  state_ = State::gathered;
}

void FlatParameter::release() {
  // A gather in flight still writes into the buffer: it completes before the buffer goes.
  if (state_ == State::gathering) gather();
  if (state_ == State::released) return;
  set_storage_bytes(0);
  state_ = State::released;
}

void FlatParameter::start_reduction(torch::ScalarType reduce_dtype) {
  finish_reduction();
  torch::NoGradGuard no_grad;
  reduce_input_ = torch::zeros({full_.numel()}, full_.options().dtype(reduce_dtype));
  int64_t offset = 0;
  for (auto& [param_name, param] : params_) {
    const auto& grad = param.grad();
    if (grad.defined()) reduce_input_.narrow(0, offset, param.numel()).copy_(grad.reshape({-1}));
    param.mutable_grad().reset();
    offset += param.numel();
  }
  reduce_output_ = torch::empty({shard_numel_}, reduce_input_.options());
  reduction_ = group_.reduce_scatter_async(reduce_output_, reduce_input_, "gradient reduce-scatter of " + name_);
}

void FlatParameter::finish_reduction() {
  if (!reduction_.valid()) return;
  reduction_.wait();
  torch::NoGradGuard no_grad;
  auto summed = reduce_output_.to(shard_.scalar_type());
  if (shard_.grad().defined()) {
    shard_.mutable_grad().add_(summed);
  } else {
    shard_.mutable_grad() = summed;
  }
  reduce_input_ = torch::Tensor();
  reduce_output_ = torch::Tensor();
}

torch::Tensor FlatParameter::gather_whole(const torch::Tensor& shard_like) {
  torch::NoGradGuard no_grad;
  auto source = shard_like.detach().contiguous();
  auto whole = torch::empty({shard_numel_ * group_.size()}, source.options());
  group_.all_gather(whole, source, "gather of " + name_ + " state");
  return whole.narrow(0, 0, numel_);
}

torch::Tensor FlatParameter::slice_of(const torch::Tensor& whole) const {
  if (whole.dim() != 1 || whole.numel() != numel_) {
    throw InputError(fmt::format("{}: expected {} elements, got {} in {} dimension(s)", name_, numel_, whole.numel(), whole.dim()));
  }
  auto padded = torch::zeros({shard_numel_ * group_.size()}, whole.options());
  padded.narrow(0, 0, numel_).copy_(whole);
  return padded.narrow(0, group_.rank() * shard_numel_, shard_numel_).clone();
}

std::vector<std::pair<std::string, torch::Tensor>> FlatParameter::split(const torch::Tensor& whole) const {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  int64_t offset = 0;
  for (const auto& [param_name, param] : params_) {
    named.emplace_back(param_name, whole.narrow(0, offset, param.numel()).view(param.sizes()));
    offset += param.numel();
  }
  return named;
}

torch::Tensor FlatParameter::flatten_parameters() const {
  if (state_ != State::gathered) throw Error("internal: " + name_ + " read while not gathered");
  return full_.narrow(0, 0, numel_);
}

}  // namespace tune::distributed
