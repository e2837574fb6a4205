// The torch wheel's LibTorch has c10d and Gloo compiled in but ships none of Gloo's headers, which
// ProcessGroupGloo.hpp includes; scripts/setup.sh installs Debian's libgloo-dev for them. This checks at run time,
// not only at compile time, that the two agree: two processes rendezvous through a TCPStore on the loopback
// interface and all-reduce through ProcessGroupGloo, as the distributed layer will.
#include <catch2/catch.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <sys/wait.h>
#include <unistd.h>

namespace {

// Rank `rank` of 2: sums [rank + 1] * 4 with the other rank and returns the result.
torch::Tensor all_reduce_as(int rank, uint16_t port) {
  c10d::TCPStoreOptions store_options;
  store_options.port = port;
  store_options.isServer = rank == 0;
  store_options.numWorkers = 2;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, options);
  std::vector<at::Tensor> tensors{torch::full({4}, static_cast<float>(rank + 1))};
  group->allreduce(tensors)->wait();
  return tensors[0];
}

}  // namespace

TEST_CASE("c10d: two processes all-reduce through ProcessGroupGloo over a loopback TCPStore", "[platform][c10d]") {
  // A port from the pid keeps parallel test runs on this machine apart.
  const auto port = static_cast<uint16_t>(20000 + getpid() % 20000);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child reports through its exit status only (no Catch2 state across fork).
    int status = 1;
    try {
      status = torch::equal(all_reduce_as(1, port), torch::full({4}, 3.0f)) ? 0 : 1;
    } catch (...) {
      status = 2;
    }
    _exit(status);
  }
  const torch::Tensor sum = all_reduce_as(0, port);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(torch::equal(sum, torch::full({4}, 3.0f)));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
