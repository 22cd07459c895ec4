// Builds safetensors bytes by hand, including files that lie, for parser tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace m2::testing {

inline std::vector<uint8_t> MakeSafetensors(const std::string& header, size_t data_bytes, uint64_t claimed_len = 0) {
  std::vector<uint8_t> out(8);
  const uint64_t n = claimed_len ? claimed_len : header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace m2::testing
