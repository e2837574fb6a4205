// Who this process is in a distributed run, read from the environment every launcher already sets: torchrun's
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; `tune train --nproc N` sets the same)
// or Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, with MASTER_ADDR/MASTER_PORT
// exported by the job script). Nothing here talks to other processes.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace tune::distributed {

struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;  // "torchrun" or "slurm": which variables it came from (for messages)
  // torchrun's agent already serves a TCPStore on MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True):
  // every rank connects to it as a client instead of rank 0 starting its own (the port is taken).
  bool agent_store = false;
};

using GetEnv = std::function<const char*(const char*)>;

// nullopt when no launcher variables are set (a plain single-process run). torchrun's variables win over Slurm's
// (torchrun inside an srun allocation sets its own). Throws tune::UsageError naming the variable when a value is
// missing, not an integer, or inconsistent (RANK >= WORLD_SIZE, ...).
std::optional<LaunchEnvironment> read_launch_environment(const GetEnv& getenv);
std::optional<LaunchEnvironment> read_launch_environment();  // from the process environment

}  // namespace tune::distributed
