#include "tune/precision/nf4_cpu_product.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>

#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/core/parallel.h"

namespace tune::precision {
namespace {

// Rows of W per slice: about 2M fp32 elements (8 MiB), at least 16 rows.
int64_t rows_per_slice(int64_t columns) { return std::max<int64_t>(16, (int64_t{2} << 20) / std::max<int64_t>(columns, 1)); }

template <typename Stored>
void dequantize_rows_as(const Nf4Tensor& weight, const float* absmax, int64_t first_row, int64_t rows, float* out) {
  const int64_t columns = weight.shape.at(1), blocksize = weight.blocksize;
  const auto& code = nf4_code();
  const uint8_t* packed = weight.packed.data_ptr<uint8_t>();
  tune::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
    auto store = [](float value) { return static_cast<float>(static_cast<Stored>(value)); };
    for (int64_t row = begin; row < end; ++row) {
      const int64_t start = (first_row + row) * columns, stop = start + columns;
      float* destination = out + row * columns - start;  // indexed by element
      int64_t element = start;
      if (element % 2 != 0) {  // an odd row width: this row starts in a byte's low nibble
        destination[element] = store(code[packed[element / 2] & 0x0F] * absmax[element / blocksize]);
        ++element;
      }
      // Block by block, two elements per byte (block sizes are even: check_nf4), so every segment but the row's
      // last starts and ends on a byte boundary; an odd last element is the high nibble of its byte.
      while (element + 1 < stop) {
        const int64_t block = element / blocksize;
        const float scale = absmax[block];
        const int64_t segment_end = std::min(stop, (block + 1) * blocksize);
        for (; element + 1 < segment_end; element += 2) {
          const uint8_t byte = packed[element / 2];
          destination[element] = store(code[byte >> 4] * scale);
          destination[element + 1] = store(code[byte & 0x0F] * scale);
        }
      }
      if (element < stop) destination[element] = store(code[packed[element / 2] >> 4] * absmax[element / blocksize]);
    }
  });
}

// Rows [first_row, first_row + rows) of W as fp32 [rows, K] holding the values dequantise-then-multiply would
// multiply: rounded to the weight's dtype, then (when that is wider, an fp32 weight) to the other operand's.
torch::Tensor dequantize_rows(const Nf4Tensor& weight, const torch::Tensor& absmax, int64_t first_row, int64_t rows,
                              torch::ScalarType operand) {
  torch::Tensor out = torch::empty({rows, weight.shape.at(1)}, torch::kFloat32);
  const float* scale = absmax.data_ptr<float>();
  switch (weight.dtype) {
    case torch::kBFloat16: dequantize_rows_as<c10::BFloat16>(weight, scale, first_row, rows, out.data_ptr<float>()); break;
    case torch::kHalf: dequantize_rows_as<c10::Half>(weight, scale, first_row, rows, out.data_ptr<float>()); break;
    default: dequantize_rows_as<float>(weight, scale, first_row, rows, out.data_ptr<float>()); break;
  }
  if (operand != torch::kFloat32 && operand != weight.dtype) out = out.to(operand).to(torch::kFloat32);
  return out;
}

void check_operands(const torch::Tensor& operand, const Nf4Tensor& weight, int64_t width, const char* what) {
  if (operand.dim() != 2 || operand.size(1) != width || !operand.device().is_cpu() || weight.shape.size() != 2 ||
      !weight.packed.device().is_cpu()) {
    throw Error(fmt::format("{}: expected a CPU matrix [M, {}] and a CPU NF4 matrix", what, width));
  }
}

}  // namespace

torch::Tensor nf4_cpu_linear(const torch::Tensor& input, const Nf4Tensor& weight) {
  check_operands(input, weight, weight.shape.at(1), "nf4_cpu_linear");
  // The products below are fp32 by construction: autocast must not cast them.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const int64_t rows = input.size(0), outputs = weight.shape.at(0);
  const torch::Tensor absmax = nf4_block_absmax(weight).contiguous();
  const torch::Tensor input32 = input.to(torch::kFloat32).contiguous();
  torch::Tensor output = torch::empty({rows, outputs}, input.options());
  const int64_t slice = rows_per_slice(weight.shape.at(1));
  torch::Tensor product = torch::empty({rows, std::min(slice, outputs)}, input32.options());
  for (int64_t first = 0; first < outputs; first += slice) {
    const int64_t count = std::min(slice, outputs - first);
    const torch::Tensor rows32 = dequantize_rows(weight, absmax, first, count, input.scalar_type());
    torch::Tensor part = product.narrow(1, 0, count);
    torch::mm_out(part, input32, rows32.t());
    output.narrow(1, first, count).copy_(part);
  }
  return output;
}

torch::Tensor nf4_cpu_linear_input_grad(const torch::Tensor& grad, const Nf4Tensor& weight) {
  check_operands(grad, weight, weight.shape.at(0), "nf4_cpu_linear_input_grad");
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const int64_t outputs = weight.shape.at(0);
  const torch::Tensor absmax = nf4_block_absmax(weight).contiguous();
  torch::Tensor sum = torch::zeros({grad.size(0), weight.shape.at(1)}, torch::kFloat32);
  const int64_t slice = rows_per_slice(weight.shape.at(1));
  for (int64_t first = 0; first < outputs; first += slice) {
    const int64_t count = std::min(slice, outputs - first);
    const torch::Tensor rows32 = dequantize_rows(weight, absmax, first, count, grad.scalar_type());
    sum.addmm_(grad.narrow(1, first, count).to(torch::kFloat32), rows32);
  }
  return sum.to(grad.scalar_type());
}

}  // namespace tune::precision
