// The torchrun / Slurm environment contract (see launch_environment.h and the README's "Distributed training").
#include "tune/distributed/launch_environment.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "tune/core/error.h"

namespace tune::distributed {
namespace {

int integer_variable(const GetEnv& getenv, const char* name, int minimum) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') {
    throw UsageError(fmt::format("environment variable {} is not set; a distributed launch (torchrun, srun or "
                                 "`tune train --nproc N`) sets it", name));
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < minimum || value > 1'000'000) {
    throw UsageError(fmt::format("environment variable {}='{}': expected an integer >= {}", name, text, minimum));
  }
  return static_cast<int>(value);
}

std::optional<int> optional_integer(const GetEnv& getenv, const char* name, int minimum) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  return integer_variable(getenv, name, minimum);
}

// SLURM_NTASKS_PER_NODE may read "4" or "4(x2)" (four tasks on each of two nodes): the count before '(' is ours.
std::optional<int> slurm_tasks_per_node(const GetEnv& getenv) {
  const char* text = getenv("SLURM_NTASKS_PER_NODE");
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || value < 1 || (*end != '\0' && *end != '(')) {
    throw UsageError(fmt::format("environment variable SLURM_NTASKS_PER_NODE='{}': expected a task count like 4 or "
                                 "4(x2)", text));
  }
  return static_cast<int>(value);
}

void check_consistent(const LaunchEnvironment& env, const char* rank_name, const char* world_name,
                      const char* local_rank_name, const char* local_world_name) {
  if (env.rank >= env.world_size) {
    throw UsageError(fmt::format("{}={} must be smaller than {}={}", rank_name, env.rank, world_name, env.world_size));
  }
  if (env.local_rank >= env.local_world_size) {
    throw UsageError(fmt::format("{}={} must be smaller than {}={}", local_rank_name, env.local_rank, local_world_name,
                                 env.local_world_size));
  }
  if (env.local_world_size > env.world_size) {
    throw UsageError(fmt::format("{}={} exceeds {}={}", local_world_name, env.local_world_size, world_name,
                                 env.world_size));
  }
}

void read_master(const GetEnv& getenv, LaunchEnvironment& env, bool required) {
  const char* addr = getenv("MASTER_ADDR");
  if (addr != nullptr && *addr != '\0') {
    env.master_addr = addr;
  } else if (required) {
    throw UsageError(fmt::format("{} launch with {} processes: MASTER_ADDR is not set; export the address of the "
                                 "rank-0 host (and MASTER_PORT) before launching", env.source, env.world_size));
  }
  if (const auto port = optional_integer(getenv, "MASTER_PORT", 1)) {
    if (*port > 65535) throw UsageError(fmt::format("environment variable MASTER_PORT={}: not a TCP port", *port));
    env.master_port = *port;
  } else if (required) {
    throw UsageError(fmt::format("{} launch with {} processes: MASTER_PORT is not set", env.source, env.world_size));
  }
}

}  // namespace

std::optional<LaunchEnvironment> read_launch_environment(const GetEnv& getenv) {
  const auto has = [&](const char* name) {
    const char* value = getenv(name);
    return value != nullptr && *value != '\0';
  };
  LaunchEnvironment env;
  if (has("RANK") || has("WORLD_SIZE")) {
    env.source = "torchrun";
    env.world_size = integer_variable(getenv, "WORLD_SIZE", 1);
    env.rank = integer_variable(getenv, "RANK", 0);
    env.local_rank = optional_integer(getenv, "LOCAL_RANK", 0).value_or(env.world_size == 1 ? 0 : env.rank);
    env.local_world_size = optional_integer(getenv, "LOCAL_WORLD_SIZE", 1).value_or(env.world_size);
    check_consistent(env, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    read_master(getenv, env, env.world_size > 1);
    const char* agent_store = getenv("TORCHELASTIC_USE_AGENT_STORE");
    env.agent_store = agent_store != nullptr && std::string(agent_store) == "True";
    return env;
  }
  if (has("SLURM_PROCID") && has("SLURM_NTASKS")) {
    env.source = "slurm";
    env.world_size = integer_variable(getenv, "SLURM_NTASKS", 1);
    env.rank = integer_variable(getenv, "SLURM_PROCID", 0);
    env.local_rank = optional_integer(getenv, "SLURM_LOCALID", 0).value_or(0);
    env.local_world_size = slurm_tasks_per_node(getenv).value_or(env.world_size);
    check_consistent(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE");
    read_master(getenv, env, env.world_size > 1);
    return env;
  }
  return std::nullopt;
}

std::optional<LaunchEnvironment> read_launch_environment() {
  return read_launch_environment([](const char* name) { return std::getenv(name); });
}

}  // namespace tune::distributed
