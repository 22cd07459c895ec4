// In-process ranks: a shared table of what each rank offers, and a barrier around each
// collective (one to publish, one before the buffers may be reused).
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "dist/comm.h"

namespace m2 {

namespace {

struct Group {
  explicit Group(int n) : barrier(n), offers(static_cast<size_t>(n)) {}
  std::barrier<> barrier;
  struct Offer {
    const void* data = nullptr;
    int64_t bytes = 0;
  };
  std::vector<Offer> offers;
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<Group> g, int rank, int size) : g_(std::move(g)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return size_; }
  std::string name() const override { return "threads"; }

  [[noreturn]] void Abort(int code) override { std::_Exit(code); }

  void Broadcast(void* data, int64_t bytes, int root) override {
    const auto t0 = std::chrono::steady_clock::now();
    if (rank_ == root) g_->offers[static_cast<size_t>(root)] = {data, bytes};
    g_->barrier.arrive_and_wait();
    const auto& o = g_->offers[static_cast<size_t>(root)];
    M2_CHECK(o.bytes == bytes, "broadcast: rank {} expects {} bytes, the root sends {}", rank_, bytes, o.bytes);
    if (rank_ != root) {
      if (bytes > 0) std::memcpy(data, o.data, static_cast<size_t>(bytes));
      stats_.bytes_received += bytes;
    } else {
      stats_.bytes_sent += bytes;
    }
    g_->barrier.arrive_and_wait();
    Count(t0);
  }

 private:
  // root -1: every rank receives.
  void Gather(const void* send, void* recv, std::span<const int64_t> counts, int root) override {
    const auto t0 = std::chrono::steady_clock::now();
    M2_CHECK(static_cast<int>(counts.size()) == size_, "all-gather: {} counts for {} ranks", counts.size(), size_);
    g_->offers[static_cast<size_t>(rank_)] = {send, counts[static_cast<size_t>(rank_)]};
    g_->barrier.arrive_and_wait();
    int64_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const auto& o = g_->offers[static_cast<size_t>(r)];
      const int64_t n = counts[static_cast<size_t>(r)];
      M2_CHECK(o.bytes == n, "all-gather: rank {} expects {} bytes from rank {}, which sends {}", rank_, n, r, o.bytes);
      const bool receive = root < 0 || root == rank_;
      if (receive && n > 0) std::memcpy(static_cast<char*>(recv) + at, o.data, static_cast<size_t>(n));
      if (receive && r != rank_) stats_.bytes_received += n;
      at += n;
    }
    if (root != rank_) stats_.bytes_sent += counts[static_cast<size_t>(rank_)];  // the root keeps its own
    g_->barrier.arrive_and_wait();
    Count(t0);
  }

  std::shared_ptr<Group> g_;
  int rank_, size_;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> MakeThreadComms(int ranks) {
  M2_CHECK(ranks >= 1, "thread comms: {} ranks", ranks);
  auto g = std::make_shared<Group>(ranks);
  std::vector<std::unique_ptr<Comm>> out;
  for (int r = 0; r < ranks; ++r) out.push_back(std::make_unique<ThreadComm>(g, r, ranks));
  return out;
}

}  // namespace m2
