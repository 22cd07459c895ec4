#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "io/json_file.h"

namespace m2 {

namespace {

using json = nlohmann::json;

// Reads one tensor entry's fields; `e.name` is set by the caller.
Status ParseEntry(const json& v, SafetensorsEntry& e) {
  if (!v.is_object()) return Error("tensor '{}': expected an object, found {}", e.name, v.type_name());
  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string())
    return Error("tensor '{}': expected a string field \"dtype\"", e.name);
  const auto dtype = DTypeFromName(dt->get<std::string>());
  if (!dtype)
    return Error("tensor '{}': unsupported dtype \"{}\" (expected one of F32, F16, BF16, F8_E4M3, F64, I64, I32, "
                 "I16, I8, U8, BOOL)",
                 e.name, dt->get<std::string>());
  e.dtype = *dtype;

  const auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return Error("tensor '{}': expected an array field \"shape\"", e.name);
  if (sh->size() > 16) return Error("tensor '{}': shape has {} dimensions, at most 16 are supported", e.name, sh->size());
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
      return Error("tensor '{}': shape entries must be non-negative integers, found {}", e.name, d.dump());
    const uint64_t n = d.get<uint64_t>();
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
    else if (n != 0 && numel > std::numeric_limits<uint64_t>::max() / n) overflow = true;
    else numel *= n;
    e.shape.push_back(static_cast<int64_t>(std::min<uint64_t>(n, std::numeric_limits<int64_t>::max())));
  }
  const uint64_t item = DTypeSize(e.dtype);
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / item)
    return Error("tensor '{}': shape {} is too large", e.name, sh->dump());

  const auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    return Error("tensor '{}': expected \"data_offsets\": [begin, end] with non-negative integers", e.name);
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.end < e.begin) return Error("tensor '{}': data_offsets [{}, {}] end before begin", e.name, e.begin, e.end);
  if (e.end - e.begin != numel * item)
    return Error("tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}] span {}", e.name, DTypeName(e.dtype),
                 sh->dump(), numel * item, e.begin, e.end, e.end - e.begin);
  return Status::Ok();
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file) {
  if (file.size() < 8)
    return Error("file is {} bytes; a safetensors file starts with an 8-byte header length", file.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];
  if (n > kMaxSafetensorsHeaderBytes)
    return Error("header length is {} bytes; at most {} is accepted (is this a safetensors file?)", n,
                 kMaxSafetensorsHeaderBytes);
  if (n > file.size() - 8)
    return Error("header length is {} bytes but only {} bytes follow it: the file is truncated", n, file.size() - 8);
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), n);
  M2_ASSIGN_OR_RETURN(json root, ParseJson(text, "the safetensors header"));
  if (!root.is_object()) return Error("the safetensors header must be a JSON object, found {}", root.type_name());

  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = file.size() - h.data_offset;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Error("\"__metadata__\" must be an object of strings, found {}", value.type_name());
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return Error("\"__metadata__\" entry '{}' must be a string, found {}", mk, mv.type_name());
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e;
    e.name = key;
    M2_RETURN_IF_ERROR(ParseEntry(value, e));
    if (e.end > data_size)
      return Error("tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes): the file is truncated "
                   "or the header is wrong",
                   e.name, e.begin, e.end, data_size);
    const size_t align = DTypeSize(e.dtype);
    if ((h.data_offset + e.begin) % align != 0)
      return Error("tensor '{}': data at file offset {} is not aligned to its {}-byte elements", e.name,
                   h.data_offset + e.begin, align);
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    const auto& prev = h.tensors[i - 1];
    const auto& cur = h.tensors[i];
    if (cur.begin < prev.end && cur.end > cur.begin)
      return Error("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap in the data section", prev.name, prev.begin,
                   prev.end, cur.name, cur.begin, cur.end);
  }
  return h;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path, bool read,
                                                               const std::function<void(uint64_t)>& on_bytes) {
  M2_ASSIGN_OR_RETURN(auto mapped, read ? MappedFile::Read(path, on_bytes) : MappedFile::Open(path));
  auto header = ParseSafetensorsHeader(mapped->bytes());
  if (!header.ok()) return Status(header.status()).WithContext("'" + path + "'");
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->file_ = std::move(mapped);
  f->header_ = std::move(header).value();
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) f->index_[f->header_.tensors[i].name] = i;
  return f;
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

TensorView SafetensorsFile::View(const SafetensorsEntry& e) const {
  TensorView v;
  v.dtype = e.dtype;
  v.shape = e.shape;
  v.data = file_->bytes().data() + header_.data_offset + e.begin;
  v.nbytes = e.end - e.begin;
  return v;
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorOut>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  // Larger elements first keeps every tensor aligned to its element size.
  std::vector<const SafetensorsTensorOut*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](auto* a, auto* b) { return DTypeSize(a->dtype) > DTypeSize(b->dtype); });
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto* t : order) specs.push_back({t->name, t->dtype, t->shape});
  return WriteSafetensorsStreaming(path, specs, metadata, [&](size_t i, uint64_t offset, uint8_t* buf, size_t n) {
    std::memcpy(buf, static_cast<const uint8_t*>(order[i]->data) + offset, n);
  });
}

}  // namespace m2

namespace m2 {

Status WriteSafetensorsStreaming(const std::string& path, const std::vector<SafetensorsTensorSpec>& tensors,
                                 const std::map<std::string, std::string>& metadata,
                                 const std::function<void(size_t, uint64_t, uint8_t*, size_t)>& fill,
                                 const std::function<void(uint64_t)>& on_bytes) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    const uint64_t bytes = numel * DTypeSize(t.dtype);
    if (offset % DTypeSize(t.dtype) != 0)
      return Error("tensor '{}' would start at offset {}, not aligned to its {}-byte elements", t.name, offset,
                   DTypeSize(t.dtype));
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) return Error("cannot create '{}': {}", path, std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, out) == 8 && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  constexpr size_t kChunk = 8u << 20;
  std::vector<uint8_t> buf(kChunk);
  uint64_t written = 0;
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    for (uint64_t done = 0; ok && done < sizes[i];) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, sizes[i] - done));
      fill(i, done, buf.data(), n);
      ok = std::fwrite(buf.data(), 1, n, out) == n;
      done += n;
      written += n;
      if (on_bytes) on_bytes(written);
    }
  }
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) return Error("error while writing '{}' (disk full?)", path);
  return Status::Ok();
}

}  // namespace m2
