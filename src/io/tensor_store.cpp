#include "io/tensor_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "io/json_file.h"

namespace m2 {

namespace fs = std::filesystem;

namespace {

// Shard names come from a file we do not trust: keep them inside the model folder.
bool SafeRelativeName(const std::string& name) {
  if (name.empty() || name.front() == '/') return false;
  for (const auto& part : fs::path(name)) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

const char* WeightMemoryName(WeightMemory m) {
  switch (m) {
    case WeightMemory::kMap: return "mapped";
    case WeightMemory::kRead: return "read into memory";
    case WeightMemory::kAuto: return "auto";
  }
  return "?";
}

namespace {

// MemAvailable from /proc/meminfo in bytes, or 0 where it cannot be read.
uint64_t AvailableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

}  // namespace

Result<std::unique_ptr<TensorStore>> TensorStore::Open(const std::string& path,
                                                       const std::function<void(size_t, size_t)>& on_shard,
                                                       WeightMemory memory,
                                                       const std::function<void(uint64_t, uint64_t)>& on_read) {
  std::error_code ec;
  std::vector<std::string> shard_files;
  std::map<std::string, std::string> index_map;  // tensor -> shard (sharded models only)
  std::string index_path;

  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json", ec)) {
      index_path = (dir / "model.safetensors.index.json").string();
      M2_ASSIGN_OR_RETURN(auto index, ReadJsonFile(index_path));
      const auto wm = index.find("weight_map");
      if (!index.is_object() || wm == index.end() || !wm->is_object())
        return Error("'{}': expected an object with a \"weight_map\" object of tensor name -> shard file", index_path);
      std::set<std::string> seen;
      for (const auto& [tensor, shard] : wm->items()) {
        if (!shard.is_string())
          return Error("'{}': weight_map entry '{}' must be a file name, found {}", index_path, tensor, shard.dump());
        const std::string s = shard.get<std::string>();
        if (!SafeRelativeName(s))
          return Error("'{}': shard name '{}' for tensor '{}' must be a file inside the model folder", index_path, s,
                       tensor);
        index_map[tensor] = s;
        if (seen.insert(s).second) shard_files.push_back((dir / s).string());
      }
      if (shard_files.empty()) return Error("'{}': weight_map lists no tensors", index_path);
    } else if (fs::exists(dir / "model.safetensors", ec)) {
      shard_files.push_back((dir / "model.safetensors").string());
    } else {
      for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.path().extension() == ".safetensors") shard_files.push_back(entry.path().string());
      if (shard_files.size() != 1)
        return Error("'{}': expected model.safetensors.index.json, model.safetensors or a single .safetensors file; "
                     "found {} .safetensors files",
                     path, shard_files.size());
    }
  } else if (fs::is_regular_file(path, ec)) {
    shard_files.push_back(path);
  } else {
    return Error("'{}' does not exist (expected a model folder or a .safetensors file)", path);
  }

  std::unique_ptr<TensorStore> store(new TensorStore());
  store->source_ = path;
  uint64_t total = 0;
  for (size_t i = 0; i < shard_files.size(); ++i) {
    const std::string& f = shard_files[i];
    if (!fs::exists(f, ec)) {
      std::string example;
      for (const auto& [t, s] : index_map)
        if ((fs::path(path) / s).string() == f) { example = t; break; }
      return Error("shard '{}' (listed in '{}' for tensors such as '{}') is missing", f, index_path, example);
    }
    const uint64_t size = fs::file_size(f, ec);
    total += ec ? 0 : size;
  }
  if (memory == WeightMemory::kAuto) {
    const uint64_t spare = std::max<uint64_t>(total / 10, uint64_t{1} << 30);
    memory = total + spare <= AvailableMemory() ? WeightMemory::kRead : WeightMemory::kMap;
  }
  store->read_ = memory == WeightMemory::kRead;
  uint64_t done = 0;
  const auto read_bytes = [&](uint64_t n) {
    done += n;
    if (on_read) on_read(done, total);
  };
  for (size_t i = 0; i < shard_files.size(); ++i) {
    const std::string& f = shard_files[i];
    M2_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(f, store->read_, read_bytes));
    for (const auto& e : file->header().tensors) {
      const auto [it, inserted] = store->index_.emplace(e.name, std::make_pair(file.get(), &e));
      if (!inserted)
        return Error("tensor '{}' appears twice: in '{}' and in '{}'", e.name, it->second.first->path(), f);
    }
    store->files_.push_back(std::move(file));
    if (on_shard) on_shard(i + 1, shard_files.size());
  }
  for (const auto& [tensor, shard] : index_map) {
    const auto it = store->index_.find(tensor);
    if (it == store->index_.end())
      return Error("'{}' says tensor '{}' is in '{}', but that file does not contain it", index_path, tensor, shard);
    if (fs::path(it->second.first->path()).filename() != fs::path(shard).filename())
      return Error("'{}' says tensor '{}' is in '{}', but it is in '{}'", index_path, tensor, shard,
                   it->second.first->path());
  }
  return store;
}

Result<TensorView> TensorStore::Get(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return Error("tensor '{}' is missing from '{}'", name, source_);
  return it->second.first->View(*it->second.second);
}

Result<TensorView> TensorStore::Get(const std::string& name, std::initializer_list<DType> dtypes,
                                    const std::vector<int64_t>& shape) const {
  M2_ASSIGN_OR_RETURN(TensorView v, Get(name));
  if (std::find(dtypes.begin(), dtypes.end(), v.dtype) == dtypes.end()) {
    std::string expected;
    for (DType d : dtypes) expected += (expected.empty() ? "" : " or ") + std::string(DTypeName(d));
    return Error("tensor '{}': expected dtype {}, found {}", name, expected, DTypeName(v.dtype));
  }
  if (v.shape != shape)
    return Error("tensor '{}': expected shape {}, found {}", name, ShapeString(shape), ShapeString(v.shape));
  return v;
}

std::vector<std::string> TensorStore::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [n, _] : index_) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace m2
