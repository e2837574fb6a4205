// Two-rank tests of the distributed layer: rank 0 runs in the test process, rank 1 in a forked child, joined over a
// loopback TCPStore with Gloo.
#pragma once

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>

#include "tune/distributed/local_launcher.h"
#include "tune/distributed/process_group.h"

inline tune::distributed::LaunchEnvironment two_rank_environment(int rank, uint16_t port) {
  tune::distributed::LaunchEnvironment env;
  env.rank = rank;
  env.world_size = 2;
  env.local_rank = rank;
  env.local_world_size = 2;
  env.master_port = port;
  env.source = "test";
  return env;
}

inline tune::distributed::GroupOptions test_group_options() {
  tune::distributed::GroupOptions options;
  options.timeout = std::chrono::seconds(60);
  return options;
}

// Runs `body(rank, port)` as rank 0 here and rank 1 in a forked child; both must return true.
// The port is the kernel's free choice, as `tune train --nproc` takes it: a port computed from the pid (as before) fell
// inside the ephemeral range, where a parallel CLI test's launcher or Python socket could hold it (CI of stop 29 failed
// with EADDRINUSE).
inline void run_two_ranks(const std::function<bool(int, uint16_t)>& body) {
  const auto port = static_cast<uint16_t>(tune::distributed::free_loopback_port());
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int status = 1;
    try {
      status = body(1, port) ? 0 : 1;
    } catch (...) {
      status = 2;
    }
    _exit(status);
  }
  bool parent_ok = false;
  try {
    parent_ok = body(0, port);
  } catch (const std::exception& error) {
    FAIL(error.what());
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(parent_ok);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

