// A failed collective names the peer that exited or stopped (distributed/peer_status.h), as a worker under torchrun
// reports it without the launcher's help: rank 0 here, rank 1 a forked child that leaves once the group has formed.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "tune/core/error.h"
#include "tune/distributed/local_launcher.h"
#include "tune/distributed/process_group.h"
#include "two_ranks.h"

namespace {

using tune::distributed::ProcessGroup;

// Rank 1 forms the group and then runs `leave` (exit, or stop itself); rank 0 forms it, waits until rank 1 has
// left, and returns the message of its next collective's failure.
std::string failure_after_peer(void (*leave)(), std::chrono::seconds timeout, pid_t* child_out) {
  const auto port = static_cast<uint16_t>(tune::distributed::free_loopback_port());
  tune::distributed::GroupOptions options;
  options.timeout = timeout;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      ProcessGroup group(two_rank_environment(1, port), options);
      group.barrier("formed");  // rank 0's side of the mesh is complete too
      leave();
    } catch (...) {
    }
    _exit(0);
  }
  *child_out = child;
  ProcessGroup group(two_rank_environment(0, port), options);
  group.barrier("formed");
  // Until the child has exited (a zombie) or stopped.
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG | WUNTRACED) == child) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto tensor = torch::ones({4});
  try {
    group.all_reduce(tensor, tune::distributed::ReduceOp::sum, "test sum");
  } catch (const tune::Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a failed collective names the rank that exited", "[distributed][peer_status]") {
  pid_t child = 0;
  const std::string message = failure_after_peer([] { _exit(0); }, std::chrono::seconds(20), &child);
  INFO(message);
  CHECK(message.find("test sum") != std::string::npos);
  CHECK(message.find("rank 1 (pid " + std::to_string(child) + " on this host) has exited") != std::string::npos);
  CHECK(message.find("pair.cc") == std::string::npos);
}

TEST_CASE("a collective that times out names the rank that stopped", "[distributed][peer_status]") {
  pid_t child = 0;
  const std::string message = failure_after_peer([] { raise(SIGSTOP); }, std::chrono::seconds(2), &child);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  INFO(message);
  CHECK(message.find("did not complete within distributed.timeout_s=2") != std::string::npos);
  CHECK(message.find("rank 1 (pid " + std::to_string(child) + " on this host) is stopped") != std::string::npos);
}
