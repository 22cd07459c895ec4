#include "cli/parallel_flags.h"

#include <algorithm>
#include <thread>

#include "cli/commands.h"

namespace m2::cli {

void AddParallelFlag(CLI::App* cmd, std::string& value) {
  cmd->add_option("--parallel", value,
                  "Split the model over the ranks of an MPI job (start m2 with mpirun -np R): tp,ep splits attention "
                  "by heads and the experts by rank (each rank holds about 1/R of the weights and KV cache); off "
                  "(default): one process. Rank 0 reads the input and prints; the README has the details")
      ->default_str("off");
}

int ThreadsFor(int threads, const ParallelStart& start) {
  if (threads != 0 || start.comm == nullptr) return threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, start.comm->local_size()));
}

Result<std::unique_ptr<Model>> LoadModel(const std::string& model, LoadOptions opts, const ParallelStart& start) {
  opts.comm = start.comm;
  opts.threads = ThreadsFor(opts.threads, start);
  if (start.comm != nullptr && start.comm->rank() != 0) opts.progress = false;
  auto m = Model::Load(model, opts);
  if (!m.ok() && start.comm != nullptr && start.comm->size() > 1) {
    Fail(Error("rank {}: {}", start.comm->rank(), m.status().message()));
    start.comm->Abort(1);
  }
  return m;
}

Result<ParallelStart> StartParallel(const std::string& value, const std::string& model, LoadOptions opts) {
  ParallelStart start;
  if (value.empty() || value == "off") {
    if (const int ranks = LaunchedRanks(); ranks > 1)
      return Error("this process was started by mpirun as one of {} ranks, but without --parallel tp,ep: each rank "
                   "would run the whole model by itself. Add --parallel tp,ep, or run m2 without mpirun",
                   ranks);
    return start;
  }
  if (value != "tp,ep" && value != "ep,tp")
    return Error("--parallel: expected tp,ep (attention split by heads and experts by rank, together) or off, found "
                 "'{}'",
                 value);
  M2_ASSIGN_OR_RETURN(start.comm, WorldComm());
  if (start.comm->rank() == 0) return start;
  auto m = LoadModel(model, opts, start);
  if (!m.ok()) return m.status();  // not reached on a split run (LoadModel ended the process)
  const Status st = (*m)->Follow();
  start.exit_code = st.ok() ? 0 : Fail(Error("rank {}: {}", start.comm->rank(), st.message()));
  return start;
}

}  // namespace m2::cli
