// Named intermediates of the forward pass, for locating a mismatch with the reference
// layer by layer (like llama.cpp's cb(cur, "attn_norm", il)). Names are
// "<stage>" for whole-model tensors and "layers.<l>.<stage>" inside layers; every
// tensor is fp32 and row-major, its first dimension the batch's tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace m2 {

class Tracer {
 public:
  virtual ~Tracer() = default;
  virtual void Record(const std::string& name, const float* data, const std::vector<int64_t>& shape) = 0;
};

}  // namespace m2

namespace m2 {

// Keeps copies of every recorded tensor, in order. A tensor recorded twice under one
// name (several forward calls) gets a "#2", "#3"... suffix.
class CollectingTracer : public Tracer {
 public:
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  void Record(const std::string& name, const float* data, const std::vector<int64_t>& shape) override {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::string key = name;
    for (int k = 2; Find(key) != nullptr; ++k) key = name + "#" + std::to_string(k);
    entries_.push_back({key, shape, std::vector<float>(data, data + count)});
  }
  const Entry* Find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace m2
