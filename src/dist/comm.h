// Communication between the ranks of a model split over several processes (MPI) or, for
// tests, several threads of one process. The model needs three collectives, each called
// by every rank in the same order:
//  - Broadcast: the root's bytes to every rank (rank 0's schedule for each forward pass).
//  - AllGatherV: each rank's slice, concatenated in rank order, on every rank (attention
//    heads, projection rows, expert outputs, logits: every value has exactly one owner, so
//    nothing is summed in an order that depends on the number of ranks).
//  - GatherV: the same, to one rank only (logits, which only rank 0 samples from).
//  - AllGatherFixed: the same with one equal-size slice per rank (statistics).
// A failure inside a collective is fatal to the process (MPI aborts the job, naming the
// rank): a rank that dies takes the others down instead of leaving them waiting.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace m2 {

// What a rank's collectives cost so far.
struct CommStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;      // this rank's own bytes, once per call (what it puts on the wire
                               // at least once; the transport may forward more)
  int64_t bytes_received = 0;  // other ranks' bytes that arrived here
  double seconds = 0;          // wall time inside collectives (waiting for slower ranks included)
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks on this machine (MPI: those sharing memory with this one), for the default thread count.
  virtual int local_size() const = 0;
  virtual std::string name() const = 0;  // "MPI (Open MPI 4.1.4)", "threads"

  virtual void Broadcast(void* data, int64_t bytes, int root) = 0;
  // recv: sum(counts) bytes; rank r's `counts[r]` bytes land at offset sum(counts[0..r)).
  // send: counts[rank()] bytes.
  void AllGatherV(const void* send, void* recv, std::span<const int64_t> counts) { Gather(send, recv, counts, -1); }
  // The same, received by `root` only (recv is not touched elsewhere and may be null there).
  void GatherV(const void* send, void* recv, std::span<const int64_t> counts, int root) {
    Gather(send, recv, counts, root);
  }

  // Ends every rank's process with this exit code (after an error that only some ranks
  // met, which would leave the others waiting in a collective).
  [[noreturn]] virtual void Abort(int code) = 0;

  void AllGatherFixed(const void* send, int64_t bytes, void* recv) {
    counts_.assign(static_cast<size_t>(size()), bytes);
    AllGatherV(send, recv, counts_);
  }

  const CommStats& stats() const { return stats_; }

 protected:
  // AllGatherV (root -1) and GatherV.
  virtual void Gather(const void* send, void* recv, std::span<const int64_t> counts, int root) = 0;
  // Counts one collective that began at t0.
  void Count(std::chrono::steady_clock::time_point t0) {
    ++stats_.calls;
    stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  CommStats stats_;

 private:
  std::vector<int64_t> counts_;
};

// `ranks` communicators connected to each other in this process: rank r must be used by
// one thread, and every rank calls the same collectives in the same order (tests run a
// model split over threads this way, with no MPI needed).
std::vector<std::unique_ptr<Comm>> MakeThreadComms(int ranks);

// The MPI world (MPI_Init on first use, MPI_Finalize at exit), or an error naming why not:
// a build without MPI says how to get one.
Result<Comm*> WorldComm();
// Whether this process was started by mpirun with more than one rank (read from the
// environment, without starting MPI): commands without --parallel refuse to run then.
int LaunchedRanks();

}  // namespace m2
