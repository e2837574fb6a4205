// row_keyed_dropout: a row's mask depends on its global row (and the key and stream), not on how rows are split over
// calls (processes); the masks are inverted dropout's; outside a scope it is plain dropout.
#include "tune/nn/row_keyed_dropout.h"

#include <catch2/catch.hpp>
#include <torch/torch.h>

using namespace tune::nn;

TEST_CASE("row-keyed dropout: rows split over two calls get the masks one call gives them") {
  const auto x = torch::rand({6, 5, 8}) + 1.0;  // no zeros, so the mask shows in the output
  const RowKey key{7, 3, 1, 0};
  torch::Tensor whole, first, second;
  {
    RowKeyScope scope(key);
    whole = row_keyed_dropout(x, 0.4, true, 11);
  }
  {
    RowKeyScope scope(RowKey{7, 3, 1, 0});
    first = row_keyed_dropout(x.slice(0, 0, 2), 0.4, true, 11);
  }
  {
    RowKeyScope scope(RowKey{7, 3, 1, 2});
    second = row_keyed_dropout(x.slice(0, 2, 6), 0.4, true, 11);
  }
  CHECK(torch::equal(whole, torch::cat({first, second})));
  // Kept elements are scaled by 1 / (1 - p), dropped ones are zero.
  const auto kept = whole != 0;
  CHECK(torch::allclose(whole.masked_select(kept), (x / 0.6).masked_select(kept)));
  // Another stream, step or row key: another mask.
  {
    RowKeyScope scope(key);
    CHECK_FALSE(torch::equal(row_keyed_dropout(x, 0.4, true, 12), whole));
  }
  {
    RowKeyScope scope(RowKey{7, 4, 1, 0});
    CHECK_FALSE(torch::equal(row_keyed_dropout(x, 0.4, true, 11), whole));
  }
  // The same key again: the same mask (what a checkpoint's recompute relies on).
  {
    RowKeyScope scope(key);
    CHECK(torch::equal(row_keyed_dropout(x, 0.4, true, 11), whole));
  }
}

TEST_CASE("row-keyed dropout: drops about p of the elements; eval and p = 0 pass through; no scope is plain dropout") {
  const auto x = torch::ones({64, 32, 32});
  RowKeyScope scope(RowKey{1, 0, 0, 0});
  const auto y = row_keyed_dropout(x, 0.25, true, 0);
  const double dropped = (y == 0).to(torch::kDouble).mean().item<double>();
  CHECK(dropped == Approx(0.25).margin(0.01));  // 65536 draws: 4 standard deviations is 0.007
  CHECK(y.mean().item<double>() == Approx(1.0).margin(0.02));
  CHECK(torch::equal(row_keyed_dropout(x, 0.25, false, 0), x));
  CHECK(torch::equal(row_keyed_dropout(x, 0.0, true, 0), x));
  CHECK(current_row_key().has_value());
}

TEST_CASE("row-keyed dropout: outside a scope it draws from the default generator") {
  CHECK_FALSE(current_row_key().has_value());
  torch::manual_seed(5);
  const auto a = row_keyed_dropout(torch::ones({4, 16}), 0.5, true, 0);
  torch::manual_seed(5);
  const auto b = torch::dropout(torch::ones({4, 16}), 0.5, true);
  CHECK(torch::equal(a, b));
}
