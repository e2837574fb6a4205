// Checkpointed gradients against the plain run (the outside truth): dropout, frozen inputs, autocast,
// autograd::grad, accumulation, no-grad passthrough and recompute checks.
#include <catch2/catch.hpp>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "test_blocks.h"
#include "tune/compat/torch_compat.h"
#include "tune/core/error.h"
#include "tune/precision/mixed_precision.h"

using tune::memory::checkpoint;
using tune::nn::PlainBlockRunner;
using tune::test::all_equal;
using tune::test::full_runner;
using tune::test::param_grads;
using tune::test::TestStack;

namespace {

constexpr int64_t kBlocks = 3, kDim = 8, kHidden = 16, kBatch = 4;

// Counts a parameter's post-accumulate-grad hook calls (the hook tune's gradient reducers and compact gradients use).
class CountingHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit CountingHook(int* count) : count_(count) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { ++*count_; }

 private:
  int* count_;
};

struct Result {
  torch::Tensor output;
  torch::Tensor input_grad;
  std::vector<torch::Tensor> grads;
};

// One forward + backward. `between` runs after forward and before backward (e.g. consumes RNG draws, as a
// training loop's data pipeline would).
Result run_once(TestStack& stack, tune::nn::BlockRunner& runner, bool input_requires_grad,
                const std::function<void()>& between = {}) {
  stack.zero_grad();
  torch::manual_seed(7);
  torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(input_requires_grad);
  torch::Tensor weights = torch::randn({kBatch, kDim});  // a non-uniform upstream gradient
  torch::Tensor output = stack.forward(runner, input);
  if (between) between();
  (output * weights).sum().backward();
  return {output.detach(), input.grad().defined() ? input.grad().clone() : torch::Tensor(), param_grads(stack)};
}

// A checkpoint without RNG restore, to show what the restore buys: identical to tune's except that the
// recompute draws dropout masks from whatever state the RNG is in at backward time.
class NoRngRestoreCheckpoint : public torch::autograd::Function<NoRngRestoreCheckpoint> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, tune::test::TestBlock block,
                               const torch::Tensor& input, at::TensorList params) {
    ctx->saved_data["block_index"] = static_cast<int64_t>(blocks().size());
    blocks().push_back(block);
    ctx->save_for_backward({input});
    return block->forward(input);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto block = blocks()[ctx->saved_data["block_index"].toInt()];
    torch::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    std::vector<torch::Tensor> wrt{input};
    for (const auto& p : block->parameters()) wrt.push_back(p);
    torch::Tensor output;
    {
      torch::AutoGradMode grad_mode(true);
      output = block->forward(input);
    }
    auto grads = torch::autograd::grad({output}, wrt, {grad_outputs[0]});
    grads.insert(grads.begin(), torch::Tensor());  // the non-tensor block argument
    return grads;
  }
  static std::vector<tune::test::TestBlock>& blocks() {
    static std::vector<tune::test::TestBlock> all;
    return all;
  }
};

class NoRngRestoreRunner : public tune::nn::BlockRunner {
 public:
  explicit NoRngRestoreRunner(const TestStack& stack) : stack_(stack) {}
  torch::Tensor run(int64_t index, const tune::nn::BlockFunction&, const torch::Tensor& input,
                    const std::vector<torch::Tensor>& params) override {
    return NoRngRestoreCheckpoint::apply(stack_.blocks[index], input, at::TensorList(params));
  }

 private:
  const TestStack& stack_;
};

void advance_rng() { torch::rand({1000}); }

torch::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

}  // namespace

TEST_CASE("checkpointed grads equal the plain run bitwise in fp32 with dropout active", "[checkpoint]") {
  TestStack stack(kBlocks, kDim, kHidden);
  PlainBlockRunner plain;
  auto runner = full_runner(kBlocks);
  const Result expected = run_once(stack, plain, true, advance_rng);
  const Result got = run_once(stack, runner, true, advance_rng);
  REQUIRE(torch::equal(got.output, expected.output));
  REQUIRE(got.input_grad.defined());
  CHECK(torch::equal(got.input_grad, expected.input_grad));
  REQUIRE(got.grads.size() == 6 * kBlocks);  // norm, fc1, fc2: weight and bias each
  CHECK(all_equal(got.grads, expected.grads));
}

TEST_CASE("without the RNG restore the recomputed dropout masks differ and so do the grads", "[checkpoint]") {
  TestStack stack(kBlocks, kDim, kHidden);
  PlainBlockRunner plain;
  NoRngRestoreRunner naive(stack);
  auto runner = full_runner(kBlocks);
  const Result expected = run_once(stack, plain, true, advance_rng);
  const Result naive_result = run_once(stack, naive, true, advance_rng);
  const Result restored = run_once(stack, runner, true, advance_rng);
  CHECK(torch::equal(naive_result.output, expected.output));  // forward is the same; only backward differs
  CHECK_FALSE(torch::equal(naive_result.input_grad, expected.input_grad));
  CHECK_FALSE(all_equal(naive_result.grads, expected.grads));
  CHECK(torch::equal(restored.input_grad, expected.input_grad));
  CHECK(all_equal(restored.grads, expected.grads));
}

TEST_CASE("backward puts the caller's RNG state back after the recompute", "[checkpoint]") {
  TestStack stack(kBlocks, kDim, kHidden);
  auto runner = full_runner(kBlocks);
  torch::manual_seed(3);
  torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
  torch::Tensor output = stack.forward(runner, input);
  advance_rng();
  const torch::Tensor before = cpu_rng_state();
  output.sum().backward();
  CHECK(torch::equal(cpu_rng_state(), before));
}

// "Exactly once" is counted where gradients land: post-hooks of each parameter's AccumulateGrad node called with a
// gradient, which is where a data-parallel reducer hooks (PyTorch's DDP does; tune's reducers use the
// post-accumulate-grad hook, counted too). Tensor hooks from register_hook are not a measure of it on LibTorch 2.x:
// its engine also runs a leaf's tensor hooks when autograd::grad captures the leaf's gradient, so they can fire
// twice while the gradient is accumulated once.
TEST_CASE("frozen input: params still get grads equal to the plain run, accumulated exactly once", "[checkpoint]") {
  // shared_ptr or intrusive_ptr depending on the LibTorch version.
  using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  TestStack stack(kBlocks, kDim, kHidden);
  PlainBlockRunner plain;
  auto runner = full_runner(kBlocks);
  const Result expected = run_once(stack, plain, false);

  std::vector<int> accumulations(stack.params().size(), 0);
  std::vector<std::pair<AccumulatorPtr, uintptr_t>> hooks;
  auto params = stack.params();
  for (size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    const uintptr_t key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [&accumulations, i](const torch::autograd::variable_list& outputs,
                            const torch::autograd::variable_list& inputs) {
          // A plain backward accumulates inside the recompute's backward; the outer pass then still calls the
          // node, with no gradient (the checkpoint returned none for it), which accumulates nothing.
          if (!inputs.empty() && inputs[0].defined()) ++accumulations[i];
          return outputs;
        }));
    hooks.emplace_back(std::move(accumulator), key);
  }
  std::vector<int> post_accumulate(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    torch::autograd::impl::set_post_acc_grad_hooks(params[i], std::make_unique<CountingHook>(&post_accumulate[i]));
  }
  const Result got = run_once(stack, runner, false);
  for (auto& [accumulator, key] : hooks) accumulator->del_post_hook(key);
  for (const auto& param : params) torch::autograd::impl::set_post_acc_grad_hooks(param, nullptr);

  CHECK_FALSE(got.input_grad.defined());
  CHECK(all_equal(got.grads, expected.grads));
  for (size_t i = 0; i < accumulations.size(); ++i) {
    INFO("param " << i);
    CHECK(accumulations[i] == 1);
    CHECK(post_accumulate[i] == 1);
  }
}

TEST_CASE("bf16 autocast: recompute runs in bf16 and grads equal the plain autocast run", "[checkpoint]") {
  using tune::precision::AutocastScope;
  using tune::precision::MixedPrecision;
  TestStack stack(kBlocks, kDim, kHidden);
  std::vector<std::pair<bool, torch::ScalarType>> seen;  // (autocast on, hidden dtype) per block call
  for (auto& block : stack.blocks) {
    block->on_hidden = [&seen](const torch::Tensor& h) { seen.emplace_back(tune::compat::autocast_cpu_enabled(), h.scalar_type()); };
  }
  auto run = [&](tune::nn::BlockRunner& runner) {
    stack.zero_grad();
    torch::manual_seed(7);
    torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
    torch::Tensor loss;
    {
      AutocastScope scope(MixedPrecision::bf16, torch::kCPU);
      loss = stack.forward(runner, input).to(torch::kFloat).pow(2).sum();
    }
    loss.backward();  // outside the scope, as a training loop does
    return Result{loss.detach(), input.grad().clone(), param_grads(stack)};
  };
  PlainBlockRunner plain;
  auto runner = full_runner(kBlocks);
  const Result expected = run(plain);
  seen.clear();
  const Result got = run(runner);

  REQUIRE(seen.size() == 2 * kBlocks);  // forward, then one recompute per block
  for (const auto& [autocast_on, dtype] : seen) {
    CHECK(autocast_on);
    CHECK(dtype == torch::kBFloat16);
  }
  CHECK_FALSE(tune::compat::autocast_cpu_enabled());  // the recompute's scope was left again
  CHECK(torch::equal(got.input_grad, expected.input_grad));
  CHECK(all_equal(got.grads, expected.grads));
}

TEST_CASE("bf16 autocast: backward inside the autocast scope still reaches the params", "[checkpoint]") {
  // Guards against autocast's cast cache handing the recompute a weight cast made under no-grad in forward.
  using tune::precision::AutocastScope;
  using tune::precision::MixedPrecision;
  TestStack stack(kBlocks, kDim, kHidden);
  auto run = [&](tune::nn::BlockRunner& runner) {
    stack.zero_grad();
    torch::manual_seed(7);
    torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
    AutocastScope scope(MixedPrecision::bf16, torch::kCPU);
    stack.forward(runner, input).to(torch::kFloat).pow(2).sum().backward();
    return param_grads(stack);
  };
  PlainBlockRunner plain;
  auto runner = full_runner(kBlocks);
  const auto expected = run(plain);
  const auto got = run(runner);
  for (const auto& grad : got) REQUIRE(grad.defined());
  CHECK(all_equal(got, expected));
}

TEST_CASE("autograd::grad w.r.t. the input only equals the plain run and leaves params alone", "[checkpoint]") {
  TestStack stack(kBlocks, kDim, kHidden);
  auto grad_of_input = [&](tune::nn::BlockRunner& runner) {
    stack.zero_grad();
    torch::manual_seed(7);
    torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
    torch::Tensor output = stack.forward(runner, input);
    return torch::autograd::grad({output.sum()}, {input})[0];
  };
  PlainBlockRunner plain;
  auto runner = full_runner(kBlocks);
  const torch::Tensor expected = grad_of_input(plain);
  const torch::Tensor got = grad_of_input(runner);
  CHECK(torch::equal(got, expected));
  for (const auto& p : stack.params()) CHECK_FALSE(p.grad().defined());
}

// autograd::grad (a pruned graph) takes the parameters' gradients as the checkpoint's returned values; a plain
// backward has them accumulated into .grad inside the recompute's backward (memory/checkpoint.cpp).
TEST_CASE("autograd::grad w.r.t. the parameters returns them through checkpointed blocks and leaves .grad alone",
          "[checkpoint]") {
  TestStack stack(kBlocks, kDim, kHidden);
  auto grads_of_params = [&](tune::nn::BlockRunner& runner) {
    stack.zero_grad();
    torch::manual_seed(7);
    const torch::Tensor input = torch::randn({kBatch, kDim});
    const torch::Tensor output = stack.forward(runner, input);
    return torch::autograd::grad({output.pow(2).sum()}, stack.params());
  };
  PlainBlockRunner plain;
  auto runner = full_runner(kBlocks);
  const std::vector<torch::Tensor> expected = grads_of_params(plain);
  const std::vector<torch::Tensor> got = grads_of_params(runner);
  CHECK(all_equal(got, expected));
  for (const auto& p : stack.params()) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("gradient accumulation over two micro-batches equals plain accumulation", "[checkpoint]") {
  TestStack stack(kBlocks, kDim, kHidden);
  auto accumulate = [&](tune::nn::BlockRunner& runner) {
    stack.zero_grad();
    torch::manual_seed(11);
    for (int micro = 0; micro < 2; ++micro) {
      torch::Tensor input = torch::randn({kBatch, kDim});
      stack.forward(runner, input).pow(2).mean().backward();
    }
    return param_grads(stack);
  };
  PlainBlockRunner plain;
  auto runner = full_runner(kBlocks);
  CHECK(all_equal(accumulate(runner), accumulate(plain)));
}

TEST_CASE("no-grad passthrough: the block is called once and no graph is kept", "[checkpoint]") {
  TestStack stack(1, kDim, kHidden);
  int calls = 0;
  auto block = stack.blocks[0].ptr();
  auto counted = [&calls, block](const torch::Tensor& x) {
    ++calls;
    return block->forward(x);
  };
  torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
  {
    torch::NoGradGuard no_grad;
    torch::Tensor output = checkpoint(counted, input, block->parameters());
    CHECK(calls == 1);
    CHECK_FALSE(output.requires_grad());
    CHECK(output.grad_fn() == nullptr);
  }
  // Grad mode on but nothing to differentiate: also a plain call.
  for (auto& p : block->parameters()) p.requires_grad_(false);
  torch::Tensor output = checkpoint(counted, input.detach(), block->parameters());
  CHECK(calls == 2);
  CHECK(output.grad_fn() == nullptr);
  for (auto& p : block->parameters()) p.requires_grad_(true);
}

TEST_CASE("a recompute that changes shape raises a clear error", "[checkpoint]") {
  TestStack stack(1, kDim, kHidden);
  auto block = stack.blocks[0].ptr();
  int calls = 0;
  auto unstable = [&calls, block](const torch::Tensor& x) {
    torch::Tensor y = block->forward(x);
    return ++calls == 1 ? y : y.narrow(0, 0, 1);
  };
  torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
  torch::Tensor output = checkpoint(unstable, input, block->parameters());
  REQUIRE_THROWS_WITH(output.sum().backward(),
                      Catch::Contains("checkpoint: recompute of block produced shape [1, 8] dtype Float") &&
                          Catch::Contains("forward produced shape [4, 8] dtype Float"));
}

TEST_CASE("a block returning its input unchanged still gets a correct gradient", "[checkpoint]") {
  auto identity = [](const torch::Tensor& x) { return x; };
  torch::Tensor input = torch::randn({kBatch, kDim}).requires_grad_(true);
  torch::Tensor output = checkpoint(identity, input, {});
  output.mul_(2);  // in place on the output must not corrupt the saved input
  output.sum().backward();
  CHECK(torch::equal(input.grad(), torch::full_like(input, 2)));
}
