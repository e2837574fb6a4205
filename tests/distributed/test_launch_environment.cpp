// The torchrun and Slurm environment contracts, read from a fake environment.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "tune/core/error.h"
#include "tune/distributed/launch_environment.h"

using tune::distributed::read_launch_environment;

namespace {

tune::distributed::GetEnv fake(std::map<std::string, std::string> variables) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(variables));
  return [shared](const char* name) -> const char* {
    const auto found = shared->find(name);
    return found == shared->end() ? nullptr : found->second.c_str();
  };
}

std::string error_of(const std::map<std::string, std::string>& variables) {
  try {
    read_launch_environment(fake(variables));
  } catch (const tune::UsageError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("launch environment: none set is a single-process run", "[distributed]") {
  CHECK_FALSE(read_launch_environment(fake({})).has_value());
  CHECK_FALSE(read_launch_environment(fake({{"SLURM_PROCID", "0"}})).has_value());  // not a task launch
}

TEST_CASE("launch environment: torchrun's variables", "[distributed]") {
  const auto env = read_launch_environment(fake({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"},
                                                 {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node7"},
                                                 {"MASTER_PORT", "29400"}}));
  REQUIRE(env.has_value());
  CHECK(env->rank == 5);
  CHECK(env->world_size == 8);
  CHECK(env->local_rank == 1);
  CHECK(env->local_world_size == 4);
  CHECK(env->master_addr == "node7");
  CHECK(env->master_port == 29400);
  CHECK(env->source == "torchrun");
  CHECK_FALSE(env->agent_store);
  const auto agent = read_launch_environment(fake({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"},
                                                   {"MASTER_PORT", "1"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  REQUIRE(agent.has_value());
  CHECK(agent->agent_store);  // torchrun's agent serves the store: rank 0 must not start a second one
}

TEST_CASE("launch environment: Slurm's variables, SLURM_NTASKS_PER_NODE in its repeated form", "[distributed]") {
  const auto env = read_launch_environment(fake({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                                                 {"SLURM_NTASKS_PER_NODE", "2(x2)"}, {"MASTER_ADDR", "10.0.0.1"},
                                                 {"MASTER_PORT", "12345"}}));
  REQUIRE(env.has_value());
  CHECK(env->rank == 3);
  CHECK(env->world_size == 4);
  CHECK(env->local_rank == 1);
  CHECK(env->local_world_size == 2);
  CHECK(env->source == "slurm");
}

TEST_CASE("launch environment: torchrun's variables win inside a Slurm allocation", "[distributed]") {
  const auto env = read_launch_environment(fake({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"RANK", "1"},
                                                 {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}));
  REQUIRE(env.has_value());
  CHECK(env->source == "torchrun");
  CHECK(env->rank == 1);
}

TEST_CASE("launch environment: bad values name the variable", "[distributed]") {
  CHECK_THAT(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
             Catch::Contains("RANK=2 must be smaller than WORLD_SIZE=2"));
  CHECK_THAT(error_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}}), Catch::Contains("RANK='one'"));
  CHECK_THAT(error_of({{"RANK", "0"}}), Catch::Contains("WORLD_SIZE is not set"));
  CHECK_THAT(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}), Catch::Contains("MASTER_ADDR"));
  CHECK_THAT(error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}}),
             Catch::Contains("MASTER_PORT"));
  CHECK_THAT(error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
             Catch::Contains("LOCAL_RANK=2 must be smaller than LOCAL_WORLD_SIZE=2"));
  CHECK_THAT(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "x"},
                       {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
             Catch::Contains("SLURM_NTASKS_PER_NODE"));
  // One process needs no rendezvous address.
  CHECK(error_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).empty());
}
