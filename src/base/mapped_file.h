// A read-only file in memory: memory-mapped (Open: weights are used straight from the
// mapping, the page cache holds them once, and a second run starts without reading the
// disk) or read into anonymous memory in 2 MiB pages (Read: what `--no-mmap` gives, see
// io/tensor_store.h for why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace m2 {

class HugePageBuffer;

class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // The whole file read into a HugePageBuffer; `on_bytes(n)` after each chunk of n bytes.
  static Result<std::unique_ptr<MappedFile>> Read(const std::string& path,
                                                  const std::function<void(uint64_t)>& on_bytes = {});
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<HugePageBuffer> copy_;  // Read(): the memory data_ points into
  std::string path_;
};

// Reads a whole (small) file into a string.
Result<std::string> ReadTextFile(const std::string& path);

}  // namespace m2
