// row_keyed_dropout: per-global-row dropout masks (row_keyed_dropout.h).
#include "tune/nn/row_keyed_dropout.h"

#include <ATen/Context.h>
#include <torch/torch.h>

#include <atomic>
#include <mutex>

namespace tune::nn {
namespace {

std::mutex key_mutex;
std::optional<RowKey> active_key;  // guarded by key_mutex
std::atomic<uint64_t> streams{0};

// splitmix64: mixes the key's fields into well-spread 64-bit seeds.
uint64_t mix(uint64_t value) {
  value += 0x9E3779B97F4A7C15ULL;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ULL;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBULL;
  return value ^ (value >> 31);
}

uint64_t row_seed(const RowKey& key, int64_t global_row, uint64_t stream) {
  uint64_t seed = mix(key.seed);
  for (const uint64_t field : {static_cast<uint64_t>(key.step), static_cast<uint64_t>(key.micro_batch),
                               static_cast<uint64_t>(global_row), stream}) {
    seed = mix(seed ^ field);
  }
  return seed;
}

}  // namespace

RowKeyScope::RowKeyScope(const RowKey& key) {
  std::lock_guard<std::mutex> lock(key_mutex);
  previous_ = active_key;
  active_key = key;
}

RowKeyScope::~RowKeyScope() {
  std::lock_guard<std::mutex> lock(key_mutex);
  active_key = previous_;
}

std::optional<RowKey> current_row_key() {
  std::lock_guard<std::mutex> lock(key_mutex);
  return active_key;
}

uint64_t next_dropout_stream() { return streams.fetch_add(1); }

torch::Tensor row_keyed_dropout(const torch::Tensor& x, double p, bool train, uint64_t stream) {
  if (!train || p <= 0.0) return x;
  const std::optional<RowKey> key = current_row_key();
  if (!key) return torch::dropout(x, p, /*train=*/true);
  // A generator of the tensor's device type (cloned from the default one, then re-seeded per row): the masks are
  // drawn where x lives.
  at::Generator generator = at::globalContext().defaultGenerator(x.device()).clone();
  torch::Tensor mask = torch::empty_like(x, x.options().requires_grad(false));
  {
    torch::NoGradGuard no_grad;
    for (int64_t row = 0; row < x.size(0); ++row) {
      {
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_current_seed(row_seed(*key, key->first_global_row + row, stream));
      }
      mask[row].bernoulli_(1.0 - p, generator);
    }
    mask.div_(1.0 - p);
  }
  return x * mask;
}

}  // namespace tune::nn
