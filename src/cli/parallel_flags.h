// --parallel: one model over the ranks of an MPI job (model/parallel.h), e.g.
//   mpirun -np 2 m2 generate MODEL -p "..." --parallel tp,ep
// Rank 0 does what the command does (reads the prompt, prints, serves HTTP); the other
// ranks load their slices and follow it, printing nothing, and exit when it is done.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "base/status.h"
#include "dist/comm.h"
#include "model/model.h"

namespace m2::cli {

void AddParallelFlag(CLI::App* cmd, std::string& value);

struct ParallelStart {
  Comm* comm = nullptr;            // null: one process
  std::optional<int> exit_code;    // set on ranks > 0: they have followed rank 0; return this
};

// Call first thing in a command's run function, before it reads input. `opts`: how every
// rank loads the model (threads: 0 means the cores of this machine shared by its ranks).
// Errors: a --parallel value other than off / tp,ep; a build without MPI; a launch by
// mpirun with several ranks but without --parallel.
Result<ParallelStart> StartParallel(const std::string& value, const std::string& model, LoadOptions opts);

// The thread count for `threads` (0: every core; on a split run, the cores of this machine
// shared by its ranks).
int ThreadsFor(int threads, const ParallelStart& start);

// Model::Load with opts.comm = start.comm and the thread default of a split run. When it
// fails on a split run the error is printed and every rank's process ends (the others
// would wait for this one forever).
Result<std::unique_ptr<Model>> LoadModel(const std::string& model, LoadOptions opts, const ParallelStart& start);

}  // namespace m2::cli
