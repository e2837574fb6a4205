// Peer liveness for failed collectives (see peer_status.h).
#include "tune/distributed/peer_status.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "tune/distributed/quiet_c10_logs.h"

namespace tune::distributed {
namespace {

std::string key_of(int rank) { return fmt::format("tune/process/{}", rank); }

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// The state letter of /proc/PID/stat (R, S, T, Z, ...), or '?' when unreadable.
char process_state(long pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return '?';
  const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 >= line.size()) return '?';
  return line[close + 2];
}


}  // namespace

void record_process(c10d::Store& store, int rank) {
  store.set(key_of(rank), fmt::format("{} {}", this_host(), static_cast<long>(::getpid())));
}

std::string describe_lost_peers(c10d::Store& store, int rank, int world_size) {
  const QuietC10Logs quiet;  // a store that no longer answers is expected here
  const std::string host = this_host();
  std::vector<std::string> lost;
  try {
    store.setTimeout(std::chrono::milliseconds(2000));
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer == rank) continue;
      const std::vector<uint8_t> bytes = store.get(key_of(peer));
      std::istringstream record(std::string(bytes.begin(), bytes.end()));
      std::string peer_host;
      long pid = 0;
      if (!(record >> peer_host >> pid) || peer_host != host || pid <= 0) continue;
      if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        lost.push_back(fmt::format("rank {} (pid {} on this host) has exited", peer, pid));
        continue;
      }
      const char state = process_state(pid);
      if (state == 'Z') lost.push_back(fmt::format("rank {} (pid {} on this host) has exited", peer, pid));
      if (state == 'T' || state == 't') {
        lost.push_back(fmt::format("rank {} (pid {} on this host) is stopped (SIGSTOP or a debugger)", peer, pid));
      }
    }
  } catch (const std::exception&) {
    // The store lives in rank 0's process: no answer from it means rank 0 is gone (or its host unreachable).
    if (rank != 0) lost.insert(lost.begin(), "rank 0, which serves the rendezvous store, has exited or is unreachable");
  }
  std::string joined;
  for (const std::string& item : lost) joined += (joined.empty() ? "" : "; ") + item;
  return joined;
}

}  // namespace tune::distributed
