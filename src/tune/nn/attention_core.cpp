// The attention core in its plain and its probability-recomputing autograd forms.
#include "tune/nn/attention_core.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <vector>

#include "tune/core/cpu_gemm_mode.h"
#include "tune/nn/block_runner.h"
#include "tune/nn/softmax_bf16.h"

namespace tune::nn {

namespace {

// [B, KVH, S, D] -> [B, KVH * groups, S, D], each key/value head repeated for its `groups` query heads.
torch::Tensor repeat_kv(const torch::Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  const auto sizes = x.sizes();
  return x.unsqueeze(2)
      .expand({sizes[0], sizes[1], groups, sizes[2], sizes[3]})
      .reshape({sizes[0], sizes[1] * groups, sizes[2], sizes[3]});
}

// The gradient of a repeated [B, KVH * groups, S, D] tensor summed back onto its [B, KVH, S, D] source.
torch::Tensor sum_repeated(const torch::Tensor& grad, int64_t groups) {
  if (groups == 1) return grad;
  const auto sizes = grad.sizes();
  return grad.reshape({sizes[0], sizes[1] / groups, groups, sizes[2], sizes[3]}).sum(2);
}

int64_t query_groups(const torch::Tensor& query, const torch::Tensor& key) {
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4, "attention_core: query and key must be [B, heads, length, head_dim]");
  TORCH_CHECK(query.size(1) % key.size(1) == 0, "attention_core: ", query.size(1),
              " query heads are not a multiple of ", key.size(1), " key/value heads");
  return query.size(1) / key.size(1);
}

torch::ScalarType softmax_dtype(torch::ScalarType scores) { return torch::promote_types(scores, torch::kFloat32); }

// softmax(q_scaled k^T + mask) in fp32 (or wider) from the pre-scaled queries and the repeated keys: the first
// half of the forward, shared by forward and the recompute in backward so that both produce the same bits.
// Two choices save full passes over the [B, H, T, S] scores, which dominate the attention core's time at long
// sequences: the scale multiplies the [B, H, T, D] queries instead of the scores (the same bits when the scale is a
// power of two, as for head_dim 64; otherwise a different last-bit rounding), and the mask is added to the
// scores in their own dtype, in place, before the cast to fp32. For our masks (0 where visible, bf16's lowest
// where hidden: nn/attention_mask.h) that addition is exact where visible and leaves hidden logits at the lowest
// value either way, so the probabilities are those of an fp32 addition. A general additive bias would be rounded
// to the compute dtype.
// softcap > 0 (Gemma 2): the scores become softcap * tanh(scores / softcap) before the mask, in their own dtype as
// transformers' eager attention does; `capped_tanh`, when given, receives tanh(scores / softcap) (the recompute's
// backward needs it for the cap's derivative, 1 - tanh^2).
// scores_of is the first part (the logits), probabilities_of the whole; the softmax is nn::softmax_of_bf16_scores
// (one pass from bf16 scores), with autograd where grad mode is on.
torch::Tensor scores_of(const torch::Tensor& scaled_query, const torch::Tensor& key, const torch::Tensor& mask,
                        double softcap, torch::Tensor* capped_tanh) {
  torch::Tensor scores = torch::matmul(scaled_query, key.transpose(2, 3));
  if (softcap > 0.0) {
    torch::Tensor squashed = torch::tanh(scores / softcap);
    // A multiplication by a number saves nothing for backward, so its output may take the mask in place below.
    scores = squashed * softcap;
    if (capped_tanh != nullptr) *capped_tanh = std::move(squashed);
  }
  // In place: the matmul output is saved by nothing, so autograd allows it; one [B, H, T, S] tensor less.
  if (mask.defined()) scores.add_(mask);
  return scores;
}

torch::Tensor probabilities_of(const torch::Tensor& scaled_query, const torch::Tensor& key, const torch::Tensor& mask,
                               double softcap = 0.0, torch::Tensor* capped_tanh = nullptr,
                               std::optional<torch::ScalarType> out_dtype = std::nullopt) {
  const torch::Tensor scores = scores_of(scaled_query, key, mask, softcap, capped_tanh);
  if (torch::GradMode::is_enabled()) {
    torch::Tensor probabilities = softmax_of_bf16_scores_differentiable(scores);
    return out_dtype ? probabilities.to(*out_dtype) : probabilities;
  }
  // The value only: in `out_dtype` straight from the kernel where asked (the value product's dtype).
  return softmax_of_bf16_scores(scores, out_dtype.value_or(softmax_dtype(scores.scalar_type())));
}

// Rows [query_begin, query_end) of the scores and the keys [key_begin, key_end) outside which every one of
// those rows is hidden by the mask.
struct KeyRange {
  int64_t query_begin, query_end, key_begin, key_end;
};

// Forward and backward work through the queries in chunks, each against only the keys its rows can see: under a
// causal mask the hidden half of the [T, S] scores is never computed (a hidden logit's probability is an exact 0,
// contributing nothing to the context or any gradient). A key counts as hidden where the mask is at most -1e30 (our
// masks use bf16's lowest value, -3.4e38; -inf works too); a general additive bias hides nothing. Chunks of
// recompute_chunk_rows: smaller ones skip more of a causal [T, T] (4 chunks skip 3/8) but their matmuls have
// head_dim as the inner size, and how fast small ones run depends on the CPU's kernels: on the AVX512-BF16 Xeon's
// fp32-accumulate products 8 chunks of 128 rows made the step slower than one chunk at T = 1024 (tune-bench,
// selective, 8 layers: 4 x 512 rows +3% over off at T = 2048, 8 x 128 rows +10%, 1 chunk +21%); on the AVX512-BF16
// EPYC's native ones 4 x 128 rows at T = 512 made the whole step 11-13% faster than one chunk. Hence a measured
// minimum (recipes/cpu_kernel_choice.h).
std::vector<KeyRange> visible_key_ranges(const torch::Tensor& mask, int64_t queries, int64_t keys) {
  // Without a mask every key is visible: one chunk, the whole matmul.
  const int64_t rows = mask.defined() ? recompute_chunk_rows(queries) : queries;
  std::vector<KeyRange> ranges;
  for (int64_t begin = 0; begin < queries; begin += rows) {
    ranges.push_back({begin, std::min(queries, begin + rows), 0, keys});
  }
  if (!mask.defined()) return ranges;

  // Keys visible to at least one row of each chunk, over all batch entries: [chunks, keys], read on the host once
  // (one device synchronisation on CUDA, not one per chunk).
  const torch::Tensor rows_visible =
      (mask > -1e30).reshape({-1, mask.size(-2), mask.size(-1)}).any(0).expand({queries, keys});
  std::vector<torch::Tensor> per_chunk;
  for (const KeyRange& range : ranges) {
    per_chunk.push_back(rows_visible.slice(0, range.query_begin, range.query_end).any(0));
  }
  const torch::Tensor visible = torch::stack(per_chunk).to(torch::kCPU).contiguous();
  const auto seen = visible.accessor<bool, 2>();
  for (size_t c = 0; c < ranges.size(); ++c) {
    int64_t first = -1, last = -1;
    for (int64_t j = 0; j < keys; ++j) {
      if (!seen[static_cast<int64_t>(c)][j]) continue;
      if (first < 0) first = j;
      last = j;
    }
    // A chunk whose rows see no key at all keeps the full range (its softmax is uniform over hidden keys).
    if (first >= 0) {
      ranges[c].key_begin = first;
      ranges[c].key_end = last + 1;
    }
  }
  return ranges;
}

}  // namespace

int64_t recompute_chunk_rows(int64_t queries) {
  return std::min(queries, std::max(attention_chunk_min_rows(), (queries + 3) / 4));
}

int64_t recompute_chunk_batch(int64_t batch, int64_t heads, int64_t rows, int64_t keys) {
  const int64_t per_entry = std::max<int64_t>(1, heads * rows * keys);
  const int64_t most = std::clamp<int64_t>(kRecomputeChunkScores / per_entry, 1, std::max<int64_t>(batch, 1));
  // Chunks of nearly equal size: 16 entries at most 5 a chunk run as 4 x 4, not 5 + 5 + 5 + 1.
  const int64_t chunks = (batch + most - 1) / most;
  return chunks <= 1 ? std::max<int64_t>(batch, 1) : (batch + chunks - 1) / chunks;
}

namespace {

// The mask's block for `range` (undefined stays undefined). A mask broadcast over the queries (one row, as a
// cross-attention's padding mask [B, 1, 1, S]) keeps its row: slicing it by the chunk's rows would empty it.
torch::Tensor mask_block(const torch::Tensor& mask, const KeyRange& range) {
  if (!mask.defined()) return mask;
  const torch::Tensor rows = mask.size(-2) == 1 ? mask : mask.slice(-2, range.query_begin, range.query_end);
  return rows.slice(-1, range.key_begin, range.key_end);
}

// The batch entries [begin, end) of one chunk of the recomputing core (recompute_chunk_batch).
struct BatchRange {
  int64_t begin, end;
};

std::vector<BatchRange> batch_ranges(int64_t batch, int64_t heads, int64_t rows, int64_t keys) {
  const int64_t entries = recompute_chunk_batch(batch, heads, rows, keys);
  std::vector<BatchRange> ranges;
  for (int64_t begin = 0; begin < batch; begin += entries) ranges.push_back({begin, std::min(batch, begin + entries)});
  return ranges;
}

// The mask's entries for `range`: a mask broadcast over the batch (size 1 there, or fewer dims) keeps its one.
torch::Tensor mask_entries(const torch::Tensor& mask, const BatchRange& range, int64_t batch) {
  if (!mask.defined() || mask.dim() < 4 || mask.size(0) != batch) return mask;
  return mask.slice(0, range.begin, range.end);
}

// The largest query-row chunk of `ranges` against its keys: what bounds a chunk's [entries, H, rows, keys] scores.
int64_t widest_rows(const std::vector<KeyRange>& ranges) {
  int64_t rows = 0;
  for (const KeyRange& range : ranges) rows = std::max(rows, range.query_end - range.query_begin);
  return rows;
}

// The recomputing form's forward: the plain form's ops, chunk by chunk over the same batch entries and query
// ranges backward will use, so that forward's transient [B, H, T, S] tensors shrink to a chunk's and hidden keys
// are skipped here too. With one chunk covering every entry and key (a short T and a small batch, or no mask) these
// are exactly the plain form's ops on the same tensors; a chunk over fewer entries computes the same rows with the
// same products, so the values are the same bits.
torch::Tensor chunked_attention(const torch::Tensor& query, const torch::Tensor& key_in, const torch::Tensor& value_in,
                                const torch::Tensor& mask, double scale, double softcap,
                                const std::vector<KeyRange>& ranges, const std::vector<BatchRange>& entries) {
  const int64_t groups = query_groups(query, key_in);
  const torch::Tensor key = repeat_kv(key_in, groups);
  const torch::Tensor value = repeat_kv(value_in, groups);
  const torch::Tensor scaled_query = query * scale;
  std::vector<torch::Tensor> per_entries;
  for (const BatchRange& batch : entries) {
    const torch::Tensor query_b = scaled_query.slice(0, batch.begin, batch.end);
    const torch::Tensor key_b = key.slice(0, batch.begin, batch.end);
    const torch::Tensor value_b = value.slice(0, batch.begin, batch.end);
    const torch::Tensor mask_b = mask_entries(mask, batch, query.size(0));
    std::vector<torch::Tensor> parts;
    for (const KeyRange& range : ranges) {
      const torch::Tensor probabilities =
          probabilities_of(query_b.slice(2, range.query_begin, range.query_end),
                           key_b.slice(2, range.key_begin, range.key_end), mask_block(mask_b, range), softcap, nullptr,
                           query.scalar_type());
      parts.push_back(
          torch::matmul(probabilities, value_b.slice(2, range.key_begin, range.key_end).to(query.scalar_type())));
    }
    per_entries.push_back(parts.size() == 1 ? parts[0] : torch::cat(parts, 2));
  }
  return per_entries.size() == 1 ? per_entries[0] : torch::cat(per_entries, 0);
}

// Saves query, key, value and the mask; backward recomputes the probabilities (module comment in the header).
struct RecomputingAttention : public torch::autograd::Function<RecomputingAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& query,
                               const torch::Tensor& key, const torch::Tensor& value,
                               const c10::optional<torch::Tensor>& mask, double scale, double softcap) {
    // The mask travels as an optional (no autograd edge, may be absent) and is kept as saved data: it takes no
    // gradient and nothing modifies it in place.
    const torch::Tensor mask_tensor = mask.value_or(torch::Tensor());
    const std::vector<KeyRange> ranges = visible_key_ranges(mask_tensor, query.size(2), key.size(2));
    const std::vector<BatchRange> entries = batch_ranges(query.size(0), query.size(1), widest_rows(ranges), key.size(2));
    const torch::Tensor context = chunked_attention(query, key, value, mask_tensor, scale, softcap, ranges, entries);
    // The chunks, flattened four numbers each, so that backward walks the same ones without scanning the mask again.
    std::vector<int64_t> flat;
    for (const KeyRange& range : ranges) {
      flat.insert(flat.end(), {range.query_begin, range.query_end, range.key_begin, range.key_end});
    }
    ctx->saved_data["ranges"] = flat;
    ctx->saved_data["entries"] = entries.front().end - entries.front().begin;
    ctx->save_for_backward({query, key, value});
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["softcap"] = softcap;
    // The dtype the matmuls ran in (query's, or the autocast dtype when forward ran under autocast): backward
    // recomputes in it whatever autocast state backward is called under.
    ctx->saved_data["compute_dtype"] = static_cast<int64_t>(context.scalar_type());
    return context;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const double scale = ctx->saved_data["scale"].toDouble();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
    const auto& mask_value = ctx->saved_data["mask"];
    const torch::Tensor mask = mask_value.isNone() ? torch::Tensor() : mask_value.toTensor();
    // Explicit dtypes below, so autocast (if backward runs inside a scope) must not recast anything.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::NoGradGuard no_grad;

    // Scaled before the cast, as forward did (autocast casts inside the matmul).
    const torch::Tensor scaled_query = (saved[0] * scale).to(dtype);
    const int64_t groups = query_groups(saved[0], saved[1]);
    const torch::Tensor key = repeat_kv(saved[1].to(dtype), groups);
    const torch::Tensor value = repeat_kv(saved[2].to(dtype), groups);
    // Contiguous once: both products below take it, and a transposed gradient (the usual [B, T, H, D] -> [B, H, T, D]
    // view of the output projection's) would be copied inside each.
    const torch::Tensor grad_context = grad_outputs[0].to(dtype).contiguous();
    const bool want_query = ctx->needs_input_grad(0), want_key = ctx->needs_input_grad(1);
    const bool want_value = ctx->needs_input_grad(2);

    const auto flat = ctx->saved_data["ranges"].toIntVector();
    const int64_t batch = scaled_query.size(0);
    const int64_t per_chunk = ctx->saved_data["entries"].toInt();
    // One query chunk over every key (no mask, or a short T) without grouped key/value heads: each chunk of batch
    // entries has its key and value gradients from one product, written into its entries (or taken as they come
    // when one chunk covers the batch). Otherwise fp32 accumulators for the key and value gradients, which every
    // query chunk adds to (and sum_repeated sums a group's heads in).
    const bool whole_keys = groups == 1 && flat.size() == 4 && flat[0] == 0 && flat[1] == scaled_query.size(2) &&
                            flat[2] == 0 && flat[3] == key.size(2);
    const bool one_chunk = whole_keys && per_chunk >= batch;
    const auto accumulate = scaled_query.options().dtype(softmax_dtype(dtype));
    auto gradient_of = [&](bool wanted, const torch::Tensor& like) {
      if (!wanted || one_chunk) return torch::Tensor();
      return whole_keys ? torch::empty(like.sizes(), like.options()) : torch::zeros(like.sizes(), accumulate);
    };
    torch::Tensor grad_query = want_query ? torch::empty_like(scaled_query) : torch::Tensor();
    torch::Tensor grad_key = gradient_of(want_key, key);
    torch::Tensor grad_value = gradient_of(want_value, value);
    // The accumulators' `add_`, a chunk of entries' `copy_`, or the product itself for a single chunk (bit for bit
    // the same: a low-precision product added to fp32 zeros and cast back is itself).
    auto add_part = [&](torch::Tensor& total, const BatchRange& entries, int64_t begin, int64_t end,
                        torch::Tensor part) {
      if (one_chunk) {
        total = std::move(part);
      } else if (whole_keys) {
        total.slice(0, entries.begin, entries.end).copy_(part);
      } else {
        total.slice(0, entries.begin, entries.end).slice(2, begin, end).add_(part);
      }
    };
    for (int64_t entry = 0; entry < batch; entry += per_chunk) {
      const BatchRange entries{entry, std::min(batch, entry + per_chunk)};
      const torch::Tensor query_b = scaled_query.slice(0, entries.begin, entries.end);
      const torch::Tensor key_b = key.slice(0, entries.begin, entries.end);
      const torch::Tensor value_b = value.slice(0, entries.begin, entries.end);
      const torch::Tensor grad_context_b = grad_context.slice(0, entries.begin, entries.end);
      const torch::Tensor mask_b = mask_entries(mask, entries, batch);
      const torch::Tensor grad_query_b =
          want_query ? grad_query.slice(0, entries.begin, entries.end) : torch::Tensor();
      for (size_t i = 0; i + 3 < flat.size(); i += 4) {
        const KeyRange chunk{flat[i], flat[i + 1], flat[i + 2], flat[i + 3]};
        const torch::Tensor query_c = query_b.slice(2, chunk.query_begin, chunk.query_end);
        const torch::Tensor key_c = key_b.slice(2, chunk.key_begin, chunk.key_end);
        const torch::Tensor value_c = value_b.slice(2, chunk.key_begin, chunk.key_end);
        const torch::Tensor grad_context_c = grad_context_b.slice(2, chunk.query_begin, chunk.query_end);
        const torch::Tensor mask_c = mask_block(mask_b, chunk);
        // context = P_c v, P_c = P in the compute dtype, P = softmax(logits), logits = (q * scale) k^T + mask (with
        // a soft cap: softcap * tanh((q * scale) k^T / softcap) + mask).
        torch::Tensor capped_tanh;
        torch::Tensor logits = scores_of(query_c, key_c, mask_c, softcap, &capped_tanh);
        torch::Tensor grad_products;  // grad_context_c v^T: the probabilities' gradient in the compute dtype
        torch::Tensor grad_scores;    // the logits' gradient in the compute dtype
        if (!capped_tanh.defined() && (want_query || want_key) && softmax_uses_tune_kernel(logits)) {
          // bf16 on the CPU: the softmax recomputed and differentiated in one pass per row (nn/softmax_bf16.h), its
          // probabilities in bf16 for the value gradient, the logits' gradient in bf16 for the products below.
          grad_products = torch::matmul(grad_context_c, value_c.transpose(2, 3));
          if (softmax_backward_uses_tune_kernel(logits, grad_products)) {
            auto [probabilities_c, fused_grad_scores] = softmax_and_backward_of_bf16_scores(logits, grad_products);
            logits.reset();
            grad_products.reset();
            if (want_value) {
              add_part(grad_value, entries, chunk.key_begin, chunk.key_end,
                       torch::matmul(probabilities_c.transpose(2, 3), grad_context_c));
            }
            grad_scores = std::move(fused_grad_scores);
          }
        }
        if (!grad_scores.defined()) {
          torch::Tensor probabilities = softmax_of_bf16_scores(logits, softmax_dtype(logits.scalar_type()));
          logits.reset();
          if (want_value) {
            add_part(grad_value, entries, chunk.key_begin, chunk.key_end,
                     torch::matmul(probabilities.to(dtype).transpose(2, 3), grad_context_c));
          }
          if (!want_query && !want_key) continue;
          if (!grad_products.defined()) grad_products = torch::matmul(grad_context_c, value_c.transpose(2, 3));
          torch::Tensor grad_probabilities = grad_products.to(probabilities.scalar_type());
          grad_products.reset();
          torch::Tensor grad_logits =
              at::_softmax_backward_data(grad_probabilities, probabilities, -1, probabilities.scalar_type());
          grad_probabilities.reset();
          probabilities.reset();
          // Through the cap: d(softcap * tanh(s / softcap)) / ds = 1 - tanh^2 (the mask is a constant).
          if (capped_tanh.defined()) grad_logits.mul_(1.0 - capped_tanh.to(grad_logits.scalar_type()).square());
          grad_scores = grad_logits.to(dtype);
        }
        if (want_query) {
          grad_query_b.slice(2, chunk.query_begin, chunk.query_end).copy_(torch::matmul(grad_scores, key_c) * scale);
        }
        if (want_key) {
          add_part(grad_key, entries, chunk.key_begin, chunk.key_end,
                   torch::matmul(grad_scores.transpose(2, 3), query_c));
        }
      }
    }
    if (want_key) grad_key = sum_repeated(grad_key, groups);
    if (want_value) grad_value = sum_repeated(grad_value, groups);
    // Gradients in the inputs' own dtypes (the same unless forward ran under autocast on fp32 inputs).
    auto as_input = [&](const torch::Tensor& grad, const torch::Tensor& input) {
      return grad.defined() ? grad.to(input.scalar_type()) : grad;
    };
    return {as_input(grad_query, saved[0]), as_input(grad_key, saved[1]), as_input(grad_value, saved[2]),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor attention_core(const torch::Tensor& query, const torch::Tensor& key_in, const torch::Tensor& value_in,
                             const torch::Tensor& mask, double scale, double softcap) {
  const int64_t groups = query_groups(query, key_in);
  const torch::Tensor key = repeat_kv(key_in, groups);
  const torch::Tensor value = repeat_kv(value_in, groups);
  const torch::Tensor probabilities = probabilities_of(query * scale, key, mask, softcap, nullptr, query.scalar_type());
  return torch::matmul(probabilities, value.to(query.scalar_type()));
}

torch::Tensor attention_core_recomputing_probabilities(const torch::Tensor& query, const torch::Tensor& key,
                                                       const torch::Tensor& value, const torch::Tensor& mask,
                                                       double scale, double softcap) {
  TORCH_CHECK(!mask.defined() || !mask.requires_grad(), "attention_core: the mask takes no gradient");
  const c10::optional<torch::Tensor> optional_mask = mask.defined() ? c10::optional<torch::Tensor>(mask) : c10::nullopt;
  return RecomputingAttention::apply(query, key, value, optional_mask, scale, softcap);
}

torch::Tensor attention_core_fused(const torch::Tensor& query, const torch::Tensor& key_in, const torch::Tensor& value_in,
                                   const torch::Tensor& mask, double scale, bool causal) {
  const int64_t groups = query_groups(query, key_in);
  // Repeated rather than enable_gqa: every backend of every 2.x release takes equal head counts.
  const torch::Tensor key = repeat_kv(key_in, groups);
  const torch::Tensor value = repeat_kv(value_in, groups);
  // Dropping a plain causal mask for is_causal is what lets the flash kernel run (it takes no explicit mask). Other
  // masks stay additive, in query's dtype as the kernels require (bf16's lowest becomes -inf in fp16: harmless,
  // since our masks never hide a whole row, attention_mask.h).
  const bool drop_mask = causal && query.size(2) == key.size(2);
  c10::optional<torch::Tensor> additive;
  if (mask.defined() && !drop_mask) additive = mask.to(query.scalar_type());
  return at::scaled_dot_product_attention(query, key.to(query.scalar_type()), value.to(query.scalar_type()), additive,
                                          /*dropout_p=*/0.0, /*is_causal=*/drop_mask, scale);
}

bool uses_fused_attention(c10::DeviceType device, c10::ScalarType dtype, bool recomputing, bool softcapped) {
  if (softcapped) return false;  // LibTorch's kernels have no soft cap
  if (device == c10::DeviceType::CUDA) return true;
  if (device != c10::DeviceType::CPU || recomputing) return false;
  if (const char* forced = std::getenv("TUNE_CPU_ATTENTION")) {
    const std::string_view choice(forced);
    if (choice == "fused") return dtype != c10::kDouble;
    if (choice == "plain") return false;
  }
  if (dtype == c10::kFloat) return true;
  if (dtype == c10::kBFloat16 || dtype == c10::kHalf) {
    if (const std::optional<bool> measured = measured_cpu_fused_attention(dtype)) return *measured;
    return libtorch_cpu_kernels_native(dtype);
  }
  return false;
}

bool recomputing_core_fuses_softmax_backward(c10::DeviceType device, c10::ScalarType dtype, bool softcapped) {
  return device == c10::DeviceType::CPU && dtype == torch::kBFloat16 && !softcapped && softmax_kernel_enabled();
}

AttentionCoreForm attention_core_form(c10::DeviceType device, c10::ScalarType dtype, bool kept_until_backward,
                                      bool selective, bool softcapped, bool in_block_recompute) {
  if (uses_fused_attention(device, dtype, selective && kept_until_backward, softcapped)) return AttentionCoreForm::fused;
  if (kept_until_backward) return AttentionCoreForm::recomputing;
  const bool recompute_recomputes =
      in_block_recompute && device == c10::DeviceType::CPU && measured_recompute_core_recomputes(dtype).value_or(false);
  return recompute_recomputes ? AttentionCoreForm::recomputing : AttentionCoreForm::plain;
}

torch::Tensor run_attention_core(BlockRunner* runner, const torch::Tensor& query, const torch::Tensor& key,
                                 const torch::Tensor& value, const torch::Tensor& mask, double scale, bool causal,
                                 double softcap) {
  // LibTorch's fused kernels where they are the better core: their backward recomputes the probabilities from q, k
  // and the saved log-sum-exp (what the recomputing form does by hand) in tiles that never hold [T, S] at once.
  const bool selective = runner != nullptr && runner->recomputes(RegionKind::attention_core);
  const bool kept_until_backward = graph_kept_until_backward(selective);
  // Grad mode on without a graph kept until a later backward: a checkpointed block's recompute.
  const bool in_block_recompute = torch::GradMode::is_enabled() && !kept_until_backward;
  switch (attention_core_form(query.device().type(), query.scalar_type(), kept_until_backward, selective,
                              softcap > 0.0, in_block_recompute)) {
    case AttentionCoreForm::fused:
      return attention_core_fused(query, key, value, mask, scale, causal);
    case AttentionCoreForm::recomputing:
      // Laid out as [B, H, T, D] once here: every product below, forward and the recompute in backward, takes them
      // as [B * H, T, D] batches, which a head-transposed view (the usual [B, T, H, D] projection output) cannot give
      // without a copy inside each product, per chunk (causal chunks copy overlapping key ranges again). The
      // copies are what gets saved instead of the views, the same bytes; already-contiguous inputs pass as they are.
      return attention_core_recomputing_probabilities(query.contiguous(), key.contiguous(), value.contiguous(), mask,
                                                      scale, softcap);
    case AttentionCoreForm::plain:
      break;
  }
  if (!torch::GradMode::is_enabled()) {
    // Without gradients (inference, a checkpointed block's first forward) nothing is kept, so the scores need not
    // exist whole: the recomputing form's forward chunks (query rows, batch entries, hidden keys skipped), the same
    // values, with transients of one chunk's scores as the activation estimates count them.
    const torch::Tensor q = query.contiguous(), k = key.contiguous(), v = value.contiguous();
    const std::vector<KeyRange> ranges = visible_key_ranges(mask, q.size(2), k.size(2));
    const std::vector<BatchRange> entries = batch_ranges(q.size(0), q.size(1), widest_rows(ranges), k.size(2));
    return chunked_attention(q, k, v, mask, scale, softcap, ranges, entries);
  }
  return attention_core(query.contiguous(), key.contiguous(), value.contiguous(), mask, scale, softcap);
}

}  // namespace tune::nn
