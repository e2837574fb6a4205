// The ddp gradient reducer against a float64 reference: two forked processes, each with its own data, train a small
// network (one block under activation checkpointing, a frozen weight as with LoRA, an unused parameter) through two
// micro-batches (the first without communication); after finish() each rank's gradients must equal the float64
// gradients of the whole loss over both ranks' data, computed by each process on its own.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <functional>

#include "tune/distributed/gradient_reducer.h"
#include "tune/distributed/process_group.h"
#include "tune/memory/checkpoint.h"
#include "distributed/two_ranks.h"

namespace {

using tune::distributed::GradientReducer;
using tune::distributed::ProcessGroup;

constexpr int kRows = 4, kMicroBatches = 2, kRanks = 2;

struct Weights {
  torch::Tensor frozen, first, second, unused;
};

Weights make_weights(torch::ScalarType dtype) {
  torch::manual_seed(11);
  Weights w;
  w.frozen = torch::randn({8, 8}).to(dtype);
  w.first = torch::randn({16, 8}).to(dtype).requires_grad_();
  w.second = torch::randn({8, 16}).to(dtype).requires_grad_();
  w.unused = torch::randn({3}).to(dtype).requires_grad_();
  return w;
}

torch::Tensor rank_input(int rank, int micro_batch, torch::ScalarType dtype) {
  torch::manual_seed(100 + rank * 10 + micro_batch);
  return torch::randn({kRows, 8}).to(dtype);
}

// Each micro-batch's loss is its share of the global mean over all ranks' and micro-batches' rows.
torch::Tensor loss_of(const Weights& w, const torch::Tensor& x, bool checkpointed) {
  const tune::nn::BlockFunction block = [&](const torch::Tensor& input) {
    return torch::tanh(torch::matmul(torch::matmul(input, w.frozen), w.first.t()));
  };
  const auto hidden = checkpointed ? tune::memory::checkpoint(block, x, {w.first}) : block(x);
  return torch::matmul(hidden, w.second.t()).pow(2).sum() / static_cast<double>(kRows * kMicroBatches * kRanks);
}

// The float64 gradients of the whole loss (every rank, every micro-batch).
std::vector<torch::Tensor> reference_gradients() {
  const Weights w = make_weights(torch::kFloat64);
  torch::Tensor total = torch::zeros({}, torch::kFloat64);
  for (int rank = 0; rank < kRanks; ++rank) {
    for (int micro = 0; micro < kMicroBatches; ++micro) total = total + loss_of(w, rank_input(rank, micro, torch::kFloat64), false);
  }
  const auto grads = torch::autograd::grad({total}, {w.first, w.second});
  return {grads[0], grads[1], torch::zeros({3}, torch::kFloat64)};
}

// Rank `rank`'s run; true when its reduced gradients match the reference to `tolerance` (relative to the largest).
// `owner` (shard_grad_op): the rank that keeps each of first, second, unused; empty: every rank (ddp). A rank must
// hold exactly the gradients it owns.
bool reduced_gradients_match(int rank, uint16_t port, int64_t bucket_bytes, torch::ScalarType reduce_dtype,
                             double tolerance, std::vector<int> owner = {}) {
  ProcessGroup group(two_rank_environment(rank, port), test_group_options());
  const Weights w = make_weights(torch::kFloat32);
  GradientReducer reducer(group, {w.first, w.second, w.unused}, {bucket_bytes, reduce_dtype, owner});
  for (int micro = 0; micro < kMicroBatches; ++micro) {
    reducer.set_sync(micro + 1 == kMicroBatches);
    loss_of(w, rank_input(rank, micro, torch::kFloat32), true).backward();
  }
  reducer.finish();
  const auto reference = reference_gradients();
  const std::vector<torch::Tensor> reduced{w.first.grad(), w.second.grad(), w.unused.grad()};
  for (size_t i = 0; i < reduced.size(); ++i) {
    const bool kept = owner.empty() || owner[i] == rank;
    if (reduced[i].defined() != kept) return false;
    if (!kept) continue;
    const double scale = std::max(1.0, reference[i].abs().max().item<double>());
    if ((reduced[i].to(torch::kFloat64) - reference[i]).abs().max().item<double>() > tolerance * scale) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("ddp reducer: summed gradients equal the float64 gradients of all ranks' data", "[distributed][reducer]") {
  SECTION("one bucket") {
    run_two_ranks([](int rank, uint16_t port) {
      return reduced_gradients_match(rank, port, 25 << 20, torch::kFloat32, 1e-5);
    });
  }
  SECTION("a bucket per parameter (launched in order whatever order gradients arrive in)") {
    run_two_ranks([](int rank, uint16_t port) {
      return reduced_gradients_match(rank, port, 16, torch::kFloat32, 1e-5);
    });
  }
  SECTION("shard_grad_op: each gradient reduced to its owner, the others released") {
    for (const int64_t bucket_bytes : {int64_t{25} << 20, int64_t{16}}) {
      run_two_ranks([bucket_bytes](int rank, uint16_t port) {
        return reduced_gradients_match(rank, port, bucket_bytes, torch::kFloat32, 1e-5, {0, 1, 1});
      });
    }
  }
  SECTION("bf16 communication: within bf16 rounding") {
    run_two_ranks([](int rank, uint16_t port) {
      return reduced_gradients_match(rank, port, 25 << 20, torch::kBFloat16, 2e-2);
    });
  }
}

TEST_CASE("ddp reducer: bucketing follows reverse parameter order and the size cap", "[distributed][reducer]") {
  run_two_ranks([](int rank, uint16_t port) {
    ProcessGroup group(two_rank_environment(rank, port), test_group_options());
    const auto a = torch::zeros({100}).requires_grad_();  // 400 bytes
    const auto b = torch::zeros({100}).requires_grad_();
    const auto c = torch::zeros({300}).requires_grad_();  // 1200 bytes
    GradientReducer reducer(group, {a, b, c}, {1000, torch::kFloat32});
    GradientReducer bf16(group, {a, b, c}, {1000, torch::kBFloat16});
    // fp32, reverse order: [c] (1200 bytes: alone, over the cap), then [b, a] (800). bf16 halves every size, so all
    // three fit one bucket (600 + 200 + 200).
    return reducer.bucket_count() == 2 && reducer.bytes_per_step() == 2000 && bf16.bucket_count() == 1 &&
           bf16.bytes_per_step() == 1000;
  });
}
