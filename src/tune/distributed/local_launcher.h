// `tune train --nproc N`: N worker processes of this same program on this machine, each told its place through the
// torchrun environment contract (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1,
// MASTER_PORT=a free port), so a worker cannot tell it from torchrun.
//
// The launcher forwards Ctrl-C / SIGTERM to the workers (once: they run in their own process group, so a terminal's
// Ctrl-C reaches only the launcher), and when a worker fails it stops the others and returns that worker's exit
// code. Workers die with the launcher (PR_SET_PDEATHSIG), so even kill -9 of the launcher leaves no orphans.
// Output: workers write to the launcher's stdout/stderr; rank 0 alone prints progress and info lines, other ranks
// only warnings and errors, prefixed "[rank K]" (core/log.h), so lines never interleave mid-line.
#pragma once

#include <string>
#include <vector>

namespace tune::distributed {

// `arguments`: the full command line of a worker (program path first, without --nproc). Returns the exit code.
int launch_local_workers(int nproc, const std::vector<std::string>& arguments);

// A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's choice).
int free_loopback_port();

}  // namespace tune::distributed
