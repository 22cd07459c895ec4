#include "base/huge_buffer.h"

#include <sys/mman.h>

#include "base/check.h"

namespace m2 {

HugePageBuffer::HugePageBuffer(size_t bytes) : bytes_(bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  raw_bytes_ = bytes_ + kHuge;
  raw_ = ::mmap(nullptr, raw_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  M2_CHECK(raw_ != MAP_FAILED, "cannot map {} bytes of memory", raw_bytes_);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(raw_) + kHuge - 1) & ~(kHuge - 1);
  data_ = reinterpret_cast<uint8_t*>(aligned);
  (void)::madvise(data_, bytes_, MADV_HUGEPAGE);  // a hint, see the header
}

HugePageBuffer::~HugePageBuffer() { ::munmap(raw_, raw_bytes_); }

}  // namespace m2
