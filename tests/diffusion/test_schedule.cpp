// Beta schedules, derived tables and respacing against the float64 numpy reference.
#include "tune/diffusion/gaussian_diffusion.h"
#include "tune/diffusion/schedule.h"

#include "diffusion/fixture.h"
#include "tune/core/error.h"

#include <catch2/catch.hpp>

using namespace tune::diffusion;
namespace fx = tune::test::diffusion;

namespace {

std::vector<std::pair<std::string, torch::Tensor ScheduleTables::*>> table_fields() {
  return {{"betas", &ScheduleTables::betas},
          {"alphas_cumprod", &ScheduleTables::alphas_cumprod},
          {"alphas_cumprod_prev", &ScheduleTables::alphas_cumprod_prev},
          {"alphas_cumprod_next", &ScheduleTables::alphas_cumprod_next},
          {"sqrt_alphas_cumprod", &ScheduleTables::sqrt_alphas_cumprod},
          {"sqrt_one_minus_alphas_cumprod", &ScheduleTables::sqrt_one_minus_alphas_cumprod},
          {"log_one_minus_alphas_cumprod", &ScheduleTables::log_one_minus_alphas_cumprod},
          {"sqrt_recip_alphas_cumprod", &ScheduleTables::sqrt_recip_alphas_cumprod},
          {"sqrt_recipm1_alphas_cumprod", &ScheduleTables::sqrt_recipm1_alphas_cumprod},
          {"posterior_variance", &ScheduleTables::posterior_variance},
          {"posterior_log_variance_clipped", &ScheduleTables::posterior_log_variance_clipped},
          {"posterior_mean_coef1", &ScheduleTables::posterior_mean_coef1},
          {"posterior_mean_coef2", &ScheduleTables::posterior_mean_coef2}};
}

}  // namespace

TEST_CASE("diffusion schedule: linear and cosine tables match the float64 reference at probe timesteps") {
  for (const std::string name : {"linear", "squaredcos_cap_v2"}) {
    const auto& expected = fx::fixture().at("schedules").at(name);
    const auto tables = ScheduleTables::from_betas(named_beta_schedule(name, 1000));
    const auto probe = fx::longs(expected.at("t"));
    for (const auto& [key, field] : table_fields()) {
      INFO(name << " " << key);
      const auto& table = tables.*field;
      CHECK(table.scalar_type() == torch::kDouble);
      CHECK(table.size(0) == 1000);
      // posterior_variance[0] is exactly 0; the rest differ from numpy only by rounding
      CHECK(fx::max_relative_difference(table.index_select(0, probe), fx::doubles(expected.at(key)), 1e-300) <= 1e-12);
    }
  }
  const auto tables = ScheduleTables::from_betas(named_beta_schedule("linear", 1000));
  CHECK(tables.betas[0].item<double>() == 1e-4);
  CHECK(tables.betas[999].item<double>() == 0.02);
  CHECK(tables.posterior_log_variance_clipped[0].item<double>() == tables.posterior_log_variance_clipped[1].item<double>());
}

TEST_CASE("diffusion schedule: the linear schedule scales its ends by 1000 / steps") {
  const auto& expected = fx::fixture().at("linear_100_steps");
  const auto betas = named_beta_schedule("linear", 100);
  const auto t = expected.at("t").get<std::vector<int64_t>>();
  const auto values = expected.at("betas").get<std::vector<double>>();
  for (size_t i = 0; i < t.size(); ++i) CHECK(betas[t[i]] == Approx(values[i]).epsilon(1e-14));
  CHECK(betas.front() == Approx(1e-3).epsilon(1e-14));
  CHECK(betas.back() == Approx(0.2).epsilon(1e-14));
}

TEST_CASE("diffusion schedule: unknown names and impossible step counts are usage errors") {
  CHECK_THROWS_AS(named_beta_schedule("cosine", 1000), tune::UsageError);
  CHECK_THROWS_AS(named_beta_schedule("linear", 0), tune::UsageError);
  CHECK_THROWS_AS(named_beta_schedule("linear", 10), tune::UsageError);  // beta_end 2 > 1
  CHECK_THROWS_WITH(named_beta_schedule("cosine", 1000), Catch::Contains("squaredcos_cap_v2"));
}

TEST_CASE("diffusion respacing: index maps match the reference for ddimN and section counts") {
  const auto& respacing = fx::fixture().at("respacing");
  for (const auto& [spec, entry] : respacing.items()) {
    INFO(spec);
    CHECK(space_timesteps(entry.at("num_timesteps").get<int64_t>(), spec) ==
          entry.at("timestep_map").get<std::vector<int64_t>>());
  }
  // "25" puts a rounding tie at 166.5: Python's round() keeps 166
  const auto kept = space_timesteps(1000, "25");
  CHECK(std::find(kept.begin(), kept.end(), 166) != kept.end());
  CHECK(space_timesteps(1000, "").size() == 1000);
  CHECK(space_timesteps(300, std::vector<int64_t>{10, 15, 20}) == space_timesteps(300, "10,15,20"));
}

TEST_CASE("diffusion respacing: spaced betas and tables match the reference; the model sees original timesteps") {
  const auto& respacing = fx::fixture().at("respacing");
  for (const std::string spec : {"ddim10", "25"}) {
    INFO(spec);
    DiffusionOptions options;
    options.timestep_respacing = spec;
    const auto diffusion = create_diffusion(options);
    const auto& expected = respacing.at(spec);
    const auto map = expected.at("timestep_map").get<std::vector<int64_t>>();
    CHECK(diffusion.num_timesteps() == static_cast<int64_t>(map.size()));
    CHECK(diffusion.original_num_steps() == 1000);
    CHECK(diffusion.timestep_map() == map);
    for (const auto& [key, field] : table_fields()) {
      INFO(key);
      CHECK(fx::max_relative_difference(diffusion.tables().*field, fx::doubles(expected.at("tables").at(key)), 1e-300) <=
            1e-12);
    }
    // alphas_cumprod of the kept steps are those of the base process
    const auto base = ScheduleTables::from_betas(named_beta_schedule("linear", 1000));
    CHECK(fx::max_relative_difference(diffusion.tables().alphas_cumprod,
                                      base.alphas_cumprod.index_select(0, fx::longs(map))) <= 1e-13);
    const auto t = torch::tensor({static_cast<int64_t>(map.size()) - 1, int64_t{1}, int64_t{0}});
    CHECK(diffusion.original_timesteps(t).equal(torch::tensor({map.back(), map[1], map[0]})));
  }
}

TEST_CASE("diffusion respacing: impossible requests are usage errors that name the request") {
  CHECK_THROWS_AS(space_timesteps(1000, "ddim999"), tune::UsageError);  // no integer stride gives exactly 999
  CHECK_THROWS_WITH(space_timesteps(1000, "ddim999"), Catch::Contains("ddim999"));
  CHECK_THROWS_AS(space_timesteps(10, "20"), tune::UsageError);
  CHECK_THROWS_AS(space_timesteps(1000, "ddimx"), tune::UsageError);
  CHECK_THROWS_AS(space_timesteps(1000, "10,,5"), tune::UsageError);
}
