// The safetensors format: 8 bytes little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}),
// then the data section. Offsets are relative to the start of the data section.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/dtype.h"
#include "base/mapped_file.h"
#include "base/status.h"
#include "base/tensor.h"

namespace m2 {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;          // in file order of their data
  std::map<std::string, std::string> metadata;    // "__metadata__"
  uint64_t data_offset = 0;                       // 8 + N
};

// Largest header accepted. The format's own reference limits it to 100 MB.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates a header. `file` is the whole file (only the header bytes are
// read; its size bounds the offsets). Every way the bytes can lie is a Status: short
// file, absurd length, bad JSON, wrong field types, unknown dtype, shape/size mismatch,
// offsets out of range or overlapping, misaligned data. Never crashes. Fuzzed.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file);

class SafetensorsFile {
 public:
  // Memory-mapped, or with `read` the whole file read into anonymous memory
  // (MappedFile::Read; `on_bytes(n)` after each n bytes read).
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path, bool read = false,
                                                       const std::function<void(uint64_t)>& on_bytes = {});

  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return file_->path(); }
  uint64_t file_size() const { return file_->size(); }
  const SafetensorsEntry* Find(const std::string& name) const;
  TensorView View(const SafetensorsEntry& e) const;

 private:
  std::unique_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, size_t> index_;
};

// One tensor for WriteSafetensors. `data` holds numel * DTypeSize(dtype) bytes.
struct SafetensorsTensorOut {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// Tensors too large to hold in memory: the header is written first, then `fill` is asked
// for each tensor's bytes in pieces of at most `chunk` bytes (offset = bytes already
// written of that tensor). `on_bytes` reports progress. Tensors are written in the order
// given; the caller orders them so each is aligned to its element size.
struct SafetensorsTensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
Status WriteSafetensorsStreaming(const std::string& path, const std::vector<SafetensorsTensorSpec>& tensors,
                                 const std::map<std::string, std::string>& metadata,
                                 const std::function<void(size_t tensor, uint64_t offset, uint8_t* buf, size_t n)>& fill,
                                 const std::function<void(uint64_t bytes)>& on_bytes = {});

// Writes a safetensors file (header padded with spaces so the data starts 8-aligned).
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorOut>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace m2
