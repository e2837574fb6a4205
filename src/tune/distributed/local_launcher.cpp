// The local multi-process launcher (see local_launcher.h).
#include "tune/distributed/local_launcher.h"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "tune/core/error.h"
#include "tune/core/log.h"

namespace tune::distributed {
namespace {

volatile sig_atomic_t received_signal = 0;  // the last SIGINT/SIGTERM the launcher got
volatile sig_atomic_t signals_received = 0;

extern "C" void remember_signal(int signal_number) {
  received_signal = signal_number;
  signals_received = signals_received + 1;
}

void kill_all(const std::vector<pid_t>& workers, const std::vector<bool>& running, int signal_number) {
  for (size_t i = 0; i < workers.size(); ++i) {
    if (running[i]) kill(workers[i], signal_number);
  }
}

// More workers than this per core only thrash (and a typo such as --nproc 1000000 would fork without end).
constexpr int kWorkersPerCore = 4;

[[noreturn]] void exec_worker(const std::vector<std::string>& arguments, int rank, int nproc, int port,
                              pid_t launcher) {
  // Dies with the launcher; the check after prctl closes the race where the launcher died just before it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(1);
  setpgid(0, 0);  // a terminal's Ctrl-C goes to the launcher only, which forwards it once
  const std::string rank_text = std::to_string(rank);
  const std::string size_text = std::to_string(nproc);
  setenv("RANK", rank_text.c_str(), 1);
  setenv("LOCAL_RANK", rank_text.c_str(), 1);
  setenv("WORLD_SIZE", size_text.c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", size_text.c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("TUNE_LAUNCHED_BY_NPROC", "1", 1);
  std::vector<char*> argv;
  for (const auto& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "error: rank %d: cannot start %s: %s\n", rank, arguments[0].c_str(), std::strerror(errno));
  _exit(127);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", exit_code_of(status));
}

}  // namespace

int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(fmt::format("cannot open a socket to find a free port: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    throw Error(fmt::format("cannot bind a loopback socket to find a free port: {}", std::strerror(errno)));
  }
  close(fd);
  return ntohs(address.sin_port);
}

int launch_local_workers(int nproc, const std::vector<std::string>& arguments) {
  if (nproc < 1) throw UsageError(fmt::format("--nproc must be >= 1, got {}", nproc));
  const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  if (nproc > kWorkersPerCore * cores) {
    throw UsageError(fmt::format("--nproc {}: more worker processes than this machine can run ({} cores: at most {} "
                                 "processes, {} per core); for more processes use several machines (torchrun, srun)",
                                 nproc, cores, kWorkersPerCore * cores, kWorkersPerCore));
  }
  const int port = free_loopback_port();
  log::info("launching {} worker processes on this machine (Gloo over 127.0.0.1:{})", nproc, port);
  std::fflush(nullptr);  // nothing buffered may be written twice by the children

  struct sigaction action{};
  action.sa_handler = remember_signal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int{}, old_term{};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);

  received_signal = 0;
  signals_received = 0;
  const pid_t launcher = getpid();
  std::vector<pid_t> workers;
  for (int rank = 0; rank < nproc; ++rank) {
    if (signals_received > 0) {
      // Stopped while starting: the workers started wait for the rest at the rendezvous and hold nothing to save.
      kill_all(workers, std::vector<bool>(workers.size(), true), SIGKILL);
      for (const pid_t worker : workers) waitpid(worker, nullptr, 0);
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
      log::error("stopped by signal {} while starting the workers ({} of {} started, now killed)", received_signal,
                 workers.size(), nproc);
      return 128 + received_signal;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      for (const pid_t worker : workers) kill(worker, SIGKILL);
      throw Error(fmt::format("cannot start worker {}: fork failed: {}", rank, std::strerror(errno)));
    }
    if (pid == 0) exec_worker(arguments, rank, nproc, port, launcher);
    workers.push_back(pid);
  }

  // Reap workers as they end. The first failure stops the rest: SIGTERM (they save nothing mid-collective: a worker
  // blocked in a collective cannot see it), then SIGKILL after a grace period. A first Ctrl-C/SIGTERM is forwarded
  // (the workers save a checkpoint together and exit 130); a second one kills them at once.
  std::vector<bool> running(workers.size(), true);
  std::vector<int> stopped_by(workers.size(), 0);  // the signal that stopped a worker (SIGSTOP, Ctrl-Z), 0 if none
  // Ranks stopped now, for the failure report: a stopped rank is the one that stopped responding, while the rank
  // that exits first is merely the one whose collective timed out waiting for it.
  auto stopped_ranks = [&]() {
    std::string names;
    for (size_t rank = 0; rank < workers.size(); ++rank) {
      if (running[rank] && stopped_by[rank] != 0) {
        names += fmt::format("{}rank {} (stopped by signal {}, {})", names.empty() ? "" : ", ", rank, stopped_by[rank],
                             strsignal(stopped_by[rank]));
      }
    }
    return names;
  };
  int remaining = nproc;
  int result = 0;
  bool stopping = false;
  int forwarded = 0;  // signals handled so far
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (remaining > 0) {
    if (signals_received > forwarded) {
      if (forwarded == 0) {
        kill_all(workers, running, received_signal);
      } else {
        log::error("second interrupt: killing the {} remaining worker(s) without a checkpoint", remaining);
        kill_all(workers, running, SIGKILL);
        if (result == 0) result = 128 + received_signal;
      }
      forwarded = signals_received;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid > 0) {
      for (size_t rank = 0; rank < workers.size(); ++rank) {
        if (workers[rank] != pid || !running[rank]) continue;
        if (WIFSTOPPED(status)) {
          stopped_by[rank] = WSTOPSIG(status);
          log::warn("worker rank {} was stopped (signal {}, {}); the other workers wait for it in their next "
                    "collective, up to distributed.timeout_s", rank, WSTOPSIG(status), strsignal(WSTOPSIG(status)));
          continue;
        }
        if (WIFCONTINUED(status)) {
          stopped_by[rank] = 0;
          continue;
        }
        running[rank] = false;
        --remaining;
        const int code = exit_code_of(status);
        if (code == 0) continue;
        if (result == 0) result = code;
        // After a forwarded Ctrl-C or SIGTERM, workers exiting 130 have saved and stopped as asked: not a failure.
        // Any other failure stops the rest, forwarded signal or not: they would wait in a collective for it.
        const bool stopped_as_asked = forwarded > 0 && (code == 130 || code == 128 + received_signal);
        if (!stopping && remaining > 0 && !stopped_as_asked) {
          const std::string stuck = stopped_ranks();
          if (stuck.empty()) {
            log::error("worker rank {} {}; stopping the other {} worker(s)", rank, describe_status(status), remaining);
          } else {
            log::error("worker {} stopped responding; worker rank {} {} (waiting for it); stopping the other {} "
                       "worker(s)", stuck, rank, describe_status(status), remaining);
          }
          stopping = true;
          kill_all(workers, running, SIGTERM);
          kill_all(workers, running, SIGCONT);  // a stopped worker acts on SIGTERM only once continued
          stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() > stop_deadline) {
      kill_all(workers, running, SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace tune::distributed
