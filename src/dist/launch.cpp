#include <cstdlib>
#include <string>

#include "dist/comm.h"

namespace m2 {

int LaunchedRanks() {
  // Open MPI's mpirun, then the PMI variables of MPICH / Slurm.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(var)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && n > 0) return static_cast<int>(n);
    }
  }
  return 1;
}

}  // namespace m2
