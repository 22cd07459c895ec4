// The MPI world as a Comm (built when CMake finds MPI: M2_HAVE_MPI).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "base/check.h"
#include "dist/comm.h"

namespace m2 {

namespace {

class MpiComm final : public Comm {
 public:
  MpiComm() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    if (const auto nl = v.find_first_of(",\n"); nl != std::string::npos) v.resize(nl);
    name_ = fmt::format("MPI ({})", v);
  }
  ~MpiComm() override { MPI_Finalize(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return name_; }

  [[noreturn]] void Abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  void Broadcast(void* data, int64_t bytes, int root) override {
    const auto t0 = std::chrono::steady_clock::now();
    M2_CHECK(bytes >= 0 && bytes <= INT_MAX, "broadcast of {} bytes: more than MPI's int count", bytes);
    MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
    if (rank_ == root) stats_.bytes_sent += bytes;
    else stats_.bytes_received += bytes;
    Count(t0);
  }

 private:
  // In 4-byte units (every payload is floats or int32), so up to 8 GiB per call. root -1:
  // every rank receives.
  void Gather(const void* send, void* recv, std::span<const int64_t> counts, int root) override {
    const auto t0 = std::chrono::steady_clock::now();
    M2_CHECK(static_cast<int>(counts.size()) == size_, "all-gather: {} counts for {} ranks", counts.size(), size_);
    counts_.resize(counts.size());
    displs_.resize(counts.size());
    int64_t at = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      M2_CHECK(counts[r] % 4 == 0, "all-gather: {} bytes from rank {} is not a whole number of 4-byte words",
               counts[r], r);
      M2_CHECK(at / 4 + counts[r] / 4 <= INT_MAX, "all-gather of {} bytes: more than MPI's int count", at + counts[r]);
      counts_[r] = static_cast<int>(counts[r] / 4);
      displs_[r] = static_cast<int>(at / 4);
      at += counts[r];
      if (static_cast<int>(r) != rank_ && (root < 0 || root == rank_)) stats_.bytes_received += counts[r];
    }
    if (root < 0)
      MPI_Allgatherv(send, counts_[static_cast<size_t>(rank_)], MPI_FLOAT, recv, counts_.data(), displs_.data(),
                     MPI_FLOAT, MPI_COMM_WORLD);
    else
      MPI_Gatherv(send, counts_[static_cast<size_t>(rank_)], MPI_FLOAT, recv, counts_.data(), displs_.data(),
                  MPI_FLOAT, root, MPI_COMM_WORLD);
    if (root != rank_) stats_.bytes_sent += counts[static_cast<size_t>(rank_)];  // the root keeps its own
    Count(t0);
  }

  int rank_ = 0, size_ = 1, local_size_ = 1;
  std::string name_;
  std::vector<int> counts_, displs_;
};

}  // namespace

Result<Comm*> WorldComm() {
  // Started once, finalized when the process exits normally (static destruction), after
  // every model using it is gone.
  static std::unique_ptr<MpiComm> world;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      error = "MPI_Init_thread failed";
      return;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      error = "this MPI library cannot be called from more than one thread (MPI_THREAD_SERIALIZED), which m2 serve needs";
      return;
    }
    world = std::make_unique<MpiComm>();
  });
  if (!world) return Error("cannot start MPI: {}", error);
  return world.get();
}

}  // namespace m2
