// A zero-filled buffer in 2 MiB pages where the kernel gives them (aligned to 2 MiB and
// MADV_HUGEPAGE, which THP's "madvise" mode needs; without THP the pages stay 4 KiB).
// A model's weights are file pages that Linux maps 2 MiB at a time when the page cache
// holds them in large folios (ext4 on 6.x kernels: `FilePmdMapped` in
// /proc/PID/smaps_rollup), so benchmarks that stand in for them (the read-bandwidth probe,
// the GEMV benchmark) read from this: in 4 KiB pages they run slower than the weights do
// (one thread on a Zen 4 VM: 25-28 against 30-32 GB/s).
#pragma once

#include <cstddef>
#include <cstdint>

namespace m2 {

class HugePageBuffer {
 public:
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  size_t bytes_, raw_bytes_;
  void* raw_;
  uint8_t* data_;
};

}  // namespace m2
