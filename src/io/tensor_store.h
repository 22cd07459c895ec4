// All tensors of a model: one safetensors file, or shards listed by
// model.safetensors.index.json. Every shard is memory-mapped; views point into them.
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

class TensorStore {
 public:
  // `path` is a model folder (with model.safetensors.index.json or model.safetensors,
  // or exactly one *.safetensors file) or a single .safetensors file.
  // `on_shard(i, n)` is called after each shard is opened (for progress displays).
  static Result<std::unique_ptr<TensorStore>> Open(const std::string& path,
                                                   const std::function<void(size_t, size_t)>& on_shard = {});

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
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> index_;
};

}  // namespace m2
