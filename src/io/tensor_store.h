// All tensors of a model: one safetensors file, or shards listed by
// model.safetensors.index.json. Every shard is memory-mapped or read into memory
// (WeightMemory); views point into them.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "io/safetensors.h"

namespace m2 {

// Where the shards' bytes live (`--mmap` / `--no-mmap`, like llama.cpp's).
//  kMap: memory-mapped: the page cache holds them once for every process that maps them,
//    loading is instant when they are cached, and a model larger than memory still runs.
//  kRead: read into anonymous memory in 2 MiB pages (base/huge_buffer.h). A decode step
//    streams every weight; on the Intel VM of the README's "Against llama.cpp" the FP8
//    slice decoded 4-5% faster from anonymous memory and steadily (spread over 40 steps
//    0.2-0.4 against 1.2-1.4 tokens/s), and mapped page-cache pages that the file had just
//    been read into after another program's run decoded at 47-74% of the usual speed,
//    for as long as they stayed cached, where a copy in anonymous memory did not slow.
//  kAuto: kRead where the files fit in the memory the kernel reports available, with a
//    tenth of them (at least 1 GiB) to spare; kMap otherwise.
enum class WeightMemory : uint8_t { kMap, kRead, kAuto };
const char* WeightMemoryName(WeightMemory m);

class TensorStore {
 public:
  // `path` is a model folder (with model.safetensors.index.json or model.safetensors,
  // or exactly one *.safetensors file) or a single .safetensors file.
  // `on_shard(i, n)` is called after each shard is opened (for progress displays);
  // with kRead, `on_read(done, total)` as bytes are read.
  static Result<std::unique_ptr<TensorStore>> Open(const std::string& path,
                                                   const std::function<void(size_t, size_t)>& on_shard = {},
                                                   WeightMemory memory = WeightMemory::kMap,
                                                   const std::function<void(uint64_t, uint64_t)>& on_read = {});
  // Whether the shards were read into memory (kRead, or kAuto that chose it).
  bool read_into_memory() const { return read_; }

  bool Has(const std::string& name) const { return index_.count(name) != 0; }
  // The tensor, or an error naming it and the files searched.
  Result<TensorView> Get(const std::string& name) const;
  // The tensor, checked: its dtype must be one of `dtypes` and its shape `shape`.
  Result<TensorView> Get(const std::string& name, std::initializer_list<DType> dtypes,
                         const std::vector<int64_t>& shape) const;

  std::vector<std::string> Names() const;  // sorted
  size_t num_files() const { return files_.size(); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  bool read_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> index_;
};

}  // namespace m2
