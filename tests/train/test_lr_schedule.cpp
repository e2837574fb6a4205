// LrSchedule against the transformers schedule formulas (warmup from 0; cosine, linear, constant; min ratio) and,
// for wsd, values read from transformers' get_wsd_schedule itself.
#include "tune/train/lr_schedule.h"

#include "fixture.h"
#include "tune/core/error.h"

#include <catch2/catch.hpp>

using tune::test::load_train_fixture;

TEST_CASE("lr schedule: values at warmup, decay and past the end match the formula fixture") {
  for (const auto& c : load_train_fixture("lr_schedule.json")) {
    tune::train::LrSchedule schedule;
    schedule.kind = c.at("kind").get<std::string>();
    schedule.peak_lr = c.at("peak_lr").get<double>();
    schedule.warmup_steps = c.at("warmup_steps").get<int64_t>();
    schedule.total_steps = c.at("total_steps").get<int64_t>();
    schedule.min_lr_ratio = c.at("min_lr_ratio").get<double>();
    schedule.decay_steps = c.value("decay_steps", int64_t{0});
    for (const auto& point : c.at("lrs")) {
      const auto step = point[0].get<int64_t>();
      INFO(schedule.kind << " warmup " << schedule.warmup_steps << " total " << schedule.total_steps << " min "
                         << schedule.min_lr_ratio << " step " << step);
      CHECK(schedule.at(step) == Approx(point[1].get<double>()).epsilon(1e-12).margin(1e-18));
    }
  }
}

TEST_CASE("lr schedule: warmup starts at 0 and an unknown kind is a usage error") {
  tune::train::LrSchedule schedule;
  schedule.peak_lr = 1.0;
  schedule.warmup_steps = 4;
  schedule.total_steps = 8;
  CHECK(schedule.at(0) == 0.0);
  CHECK(schedule.at(2) == 0.5);
  CHECK(schedule.at(4) == 1.0);
  CHECK(schedule.at(8) == Approx(0.0).margin(1e-15));
  schedule.kind = "cosin";
  CHECK_THROWS_AS(schedule.at(0), tune::UsageError);
}
