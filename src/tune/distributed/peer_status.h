// Which ranks of a run have exited or stopped, as far as this process can tell, for the error of a failed collective.
// Gloo only says "connection closed by peer"; the launcher of `tune train --nproc` names the rank, but under torchrun
// or Slurm each worker's own message is all a user sees. So every rank records "<host> <pid>" in the rendezvous
// store when the group forms, and a rank whose collective failed looks its peers up: a peer on this host whose pid is
// gone has exited, one in state T is stopped; a store that no longer answers means rank 0, which serves it, is gone.
// Peers on other hosts cannot be checked from here and are not named.
#pragma once

#include <string>

namespace c10d {
class Store;
}  // namespace c10d

namespace tune::distributed {

// Records this process under `rank` (called once the store is up, before the backend forms).
void record_process(c10d::Store& store, int rank);

// "rank 1 (pid 4242 on this host) has exited", several joined by "; ", or "" when nothing could be determined.
// Bounded: at most about two seconds of store lookups.
std::string describe_lost_peers(c10d::Store& store, int rank, int world_size);

}  // namespace tune::distributed
