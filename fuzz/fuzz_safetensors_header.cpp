// libFuzzer target: any bytes given to the safetensors header parser either fail with a
// Status or yield a header whose every tensor lies inside the data, without overlap.
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = m2::ParseSafetensorsHeader({data, size});
  if (!h.ok()) return 0;
  const uint64_t data_size = size - h->data_offset;
  uint64_t prev_end = 0;
  for (const auto& t : h->tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (t.end > data_size || t.begin > t.end || t.end - t.begin != numel * m2::DTypeSize(t.dtype)) std::abort();
    if (t.end > t.begin && t.begin < prev_end) std::abort();
    if (t.end > t.begin) prev_end = t.end;
  }
  return 0;
}
