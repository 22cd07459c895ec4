// WorldComm in a build without MPI.
#include "dist/comm.h"

namespace m2 {

Result<Comm*> WorldComm() {
  return Error(
      "this m2 was built without MPI, so it cannot run one model over several processes. Install Open MPI "
      "(Debian: apt install libopenmpi-dev openmpi-bin) and build again: CMake finds it by itself");
}

}  // namespace m2
