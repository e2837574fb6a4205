// How many optimizer steps `training.epochs` gives: every micro-batch of every epoch must be trained, so the count
// rounds up (an epoch of 10 batches at accumulation 3 is 4 steps, not 3 that would never train batch 10).
#include <catch2/catch.hpp>

#include "tune/recipes/common_schema.h"

namespace {

tune::recipes::TrainingSettings settings(int64_t epochs, int64_t accumulation, int64_t max_steps = 0) {
  tune::recipes::TrainingSettings training;
  training.epochs = epochs;
  training.gradient_accumulation_steps = accumulation;
  training.max_steps = max_steps;
  return training;
}

}  // namespace

TEST_CASE("training.epochs rounds the step count up so no batch is left untrained", "[recipes]") {
  // Expected values: the smallest S with S * accumulation >= epochs * batches, counted out by hand.
  CHECK(settings(1, 1).total_steps(10) == 10);
  CHECK(settings(1, 3).total_steps(10) == 4);   // 3 steps would train 9 of 10 batches
  CHECK(settings(2, 3).total_steps(10) == 7);   // 20 micro-batches: 6 steps train 18
  CHECK(settings(3, 4).total_steps(8) == 6);    // divides exactly: no extra step
  CHECK(settings(1, 8).total_steps(3) == 1);    // fewer batches than one accumulation
  CHECK(settings(1, 2).total_steps(0) == 1);    // an empty epoch still runs one step (the loader wraps)
  CHECK(settings(5, 3, /*max_steps=*/17).total_steps(10) == 17);  // max_steps wins
}
