// The SwiGLU product silu(gate) * up of the Llama-family MLP as one CPU kernel each way, for bf16 tensors (autocast's
// projection outputs).
//
// Why: op by op, forward is silu (a bf16 pass) and the product (another), and backward the product's two gradients
// and silu's backward (three more passes, each widening and narrowing every element), with silu's output kept for the
// product's backward beside gate and up. Here forward reads gate and up once and writes the product; backward reads
// the gradient, gate and up once and writes both gradients; only gate and up are kept (one [tokens, inner] tensor
// less per layer).
//
// The values follow the op-by-op form's roundings: silu(gate) = gate / (1 + exp(-gate)) in fp32 rounded to bf16,
// the product and the gradients dp * silu and dp * up rounded to bf16, silu's derivative
// sigmoid * (1 + gate * (1 - sigmoid)) applied in fp32 and rounded once. exp is tune's polynomial (about 2 fp32 ulps,
// nn/cpu_vector_math.h) where LibTorch's is Sleef's, so a value can differ by one bf16 ulp where the fp32 value sits
// at a rounding boundary. TUNE_CPU_SWIGLU=libtorch keeps the ATen ops.
#pragma once

#include <torch/types.h>

namespace tune::nn {

// Whether the kernels run at all: not with TUNE_CPU_SWIGLU=libtorch.
bool swiglu_cpu_enabled();

// Whether the kernels take these: CPU, both bf16, contiguous, of one shape, not empty; swiglu_cpu_enabled().
bool swiglu_cpu_fits(const torch::Tensor& gate, const torch::Tensor& up);

// silu(gate) * up, differentiable in both; keeps gate and up for backward.
torch::Tensor swiglu_cpu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace tune::nn
