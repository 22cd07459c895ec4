#include "text/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <queue>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "text/byte_level.h"

namespace m2::text {

namespace {

using nlohmann::json;

// Pieces at most this long are remembered per thread: most words of a text recur, and a
// hit skips the merge loop. Direct-mapped, so memory stays fixed (~1.5 MiB per thread).
constexpr size_t kCacheSlots = 1 << 14;
constexpr size_t kCacheMaxBytes = 24;
constexpr size_t kCacheMaxIds = 8;

struct CacheSlot {
  uint64_t hash = 0;
  uint8_t key_len = 0;  // 0: empty (pieces are never empty)
  uint8_t n_ids = 0;
  char key[kCacheMaxBytes];
  int32_t ids[kCacheMaxIds];
};

struct PieceCache {
  uint64_t owner = 0;  // the BpeModel uid the slots belong to
  std::vector<CacheSlot> slots;
};

PieceCache& ThreadCache(uint64_t owner) {
  thread_local PieceCache cache;
  if (cache.owner != owner) {
    // Another model used this thread last: its entries mean nothing here.
    cache.slots.assign(kCacheSlots, CacheSlot());
    cache.owner = owner;
  }
  return cache;
}

uint64_t HashBytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  h ^= h >> 29;
  return h;
}

std::atomic<uint64_t> g_next_uid{1};

}  // namespace

void BpeModel::InsertMerge(int32_t left, int32_t right, uint32_t rank, int32_t merged) {
  uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  size_t i = (key * 0x9E3779B97F4A7C15ull) >> merge_shift_;
  while (merges_[i].key != kEmptyKey && merges_[i].key != key) i = (i + 1) & (merges_.size() - 1);
  if (merges_[i].key == kEmptyKey) ++merge_count_;
  // A repeated pair keeps its last rank: HF collects the merges into a HashMap in file
  // order, so a later duplicate overwrites the earlier one.
  merges_[i] = {key, rank, merged};
}

Result<std::unique_ptr<BpeModel>> BpeModel::Parse(const json& spec, const std::string& where) {
  if (!spec.is_object()) return Error("{}: expected an object, found {}", where, spec.type_name());
  auto type = spec.find("type");
  if (type != spec.end() && !(type->is_string() && type->get<std::string>() == "BPE"))
    return Error("{}.type: unsupported model {} (only \"BPE\" is supported)", where, type->dump());
  if (auto d = spec.find("dropout"); d != spec.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    return Error("{}.dropout: expected null (BPE dropout makes encoding random), found {}", where, d->dump());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = spec.find(key);
    if (it != spec.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      return Error("{}.{}: expected null or \"\" for byte-level BPE, found {}", where, key, it->dump());
  }
  if (auto b = spec.find("byte_fallback"); b != spec.end() && !b->is_null() && !(b->is_boolean() && !b->get<bool>()))
    return Error("{}.byte_fallback: expected false (byte-level BPE needs no byte fallback), found {}", where, b->dump());

  std::unique_ptr<BpeModel> m(new BpeModel());
  m->uid_ = g_next_uid.fetch_add(1);

  auto vocab = spec.find("vocab");
  if (vocab == spec.end() || !vocab->is_object())
    return Error("{}.vocab: expected an object of token -> id, found {}", where,
                 vocab == spec.end() ? "nothing" : vocab->type_name());
  m->vocab_.reserve(vocab->size());
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() >= kMaxTokenId)
      return Error("{}.vocab[\"{}\"]: expected an id in [0, 2^24), found {}", where, it.key(), it.value().dump());
    int64_t id = it.value().get<int64_t>();
    m->vocab_.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  m->id_to_token_.resize(max_id + 1);
  m->id_present_.assign(max_id + 1, false);
  for (const auto& [token, id] : m->vocab_) {
    if (m->id_present_[id])
      return Error("{}.vocab: id {} is given to both \"{}\" and \"{}\"", where, id, m->id_to_token_[id], token);
    m->id_present_[id] = true;
    m->id_to_token_[id] = token;
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch = BytesToByteLevel(std::string_view(reinterpret_cast<const char*>(&b), 1));
    auto it = m->vocab_.find(ch);
    m->byte_id_[b] = it == m->vocab_.end() ? -1 : it->second;
  }

  if (auto u = spec.find("unk_token"); u != spec.end() && !u->is_null()) {
    if (!u->is_string()) return Error("{}.unk_token: expected a string or null, found {}", where, u->dump());
    auto it = m->vocab_.find(u->get<std::string>());
    if (it == m->vocab_.end())
      return Error("{}.unk_token: \"{}\" is not in the vocab", where, u->get<std::string>());
    m->unk_id_ = it->second;
  }
  if (auto f = spec.find("fuse_unk"); f != spec.end() && f->is_boolean()) m->fuse_unk_ = f->get<bool>();
  if (auto g = spec.find("ignore_merges"); g != spec.end() && g->is_boolean()) m->ignore_merges_ = g->get<bool>();

  auto merges = spec.find("merges");
  if (merges == spec.end() || !merges->is_array())
    return Error("{}.merges: expected an array, found {}", where, merges == spec.end() ? "nothing" : merges->type_name());
  size_t capacity = 16;
  while (capacity < merges->size() * 2) capacity *= 2;
  m->merges_.assign(capacity, MergeEntry{kEmptyKey, 0, 0});
  m->merge_shift_ = 64 - __builtin_ctzll(capacity);
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& entry = (*merges)[rank];
    std::string a, b;
    // Two spellings: "a b" (tokenizers < 0.20) and ["a", "b"] (0.20 and later).
    if (entry.is_string()) {
      const std::string& s = entry.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return Error("{}.merges[{}]: expected \"left right\" with one space, found {}", where, rank, entry.dump());
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      a = entry[0].get<std::string>();
      b = entry[1].get<std::string>();
    } else {
      return Error("{}.merges[{}]: expected \"left right\" or [\"left\", \"right\"], found {}", where, rank,
                   entry.dump());
    }
    auto ia = m->vocab_.find(a), ib = m->vocab_.find(b), ic = m->vocab_.find(a + b);
    if (ia == m->vocab_.end() || ib == m->vocab_.end() || ic == m->vocab_.end())
      return Error("{}.merges[{}]: {} is not in the vocab", where, rank,
                   ia == m->vocab_.end() ? "\"" + a + "\"" : ib == m->vocab_.end() ? "\"" + b + "\"" : "\"" + a + b + "\"");
    m->InsertMerge(ia->second, ib->second, static_cast<uint32_t>(rank), ic->second);
  }
  if (m->ignore_merges_) {
    for (const auto& [token, id] : m->vocab_)
      if (auto bytes = ByteLevelToBytes(token)) m->bytes_to_id_.emplace(std::move(*bytes), id);
  }
  return m;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_limit() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::MergeSmall(std::vector<int32_t>& sym) const {
  // rank[i]: rank of the pair (sym[i], sym[i+1]), UINT32_MAX when it has no merge.
  uint32_t rank[64];
  int32_t merged[64];
  size_t n = sym.size();
  auto pair_at = [&](size_t i) {
    const MergeEntry* e = FindMerge(sym[i], sym[i + 1]);
    rank[i] = e ? e->rank : UINT32_MAX;
    merged[i] = e ? e->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) pair_at(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;  // strict: the leftmost of equal ranks wins
    if (rank[best] == UINT32_MAX) break;
    sym[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      sym[i] = sym[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) pair_at(best - 1);
    if (best + 1 < n) pair_at(best);
  }
  sym.resize(n);
}

void BpeModel::MergeLarge(std::vector<int32_t>& sym) const {
  // HF's algorithm: a doubly linked list of symbols and a min-heap of (rank, position).
  struct Node {
    int32_t id;
    int32_t prev, next;  // -1: none
  };
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(sym.size());
  std::vector<Node> nodes(n);
  for (int32_t i = 0; i < n; ++i) nodes[i] = {sym[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<bool> alive(n, true);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const MergeEntry* e = FindMerge(nodes[i].id, nodes[i + 1].id))
      heap.push({e->rank, static_cast<uint32_t>(i), e->merged});
  while (!heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    int32_t pos = static_cast<int32_t>(top.pos);
    if (!alive[pos] || nodes[pos].next < 0) continue;
    int32_t right = nodes[pos].next;
    const MergeEntry* e = FindMerge(nodes[pos].id, nodes[right].id);
    if (!e || e->merged != top.merged) continue;  // stale: the pair changed since
    nodes[pos].id = top.merged;
    alive[right] = false;
    nodes[pos].next = nodes[right].next;
    if (nodes[pos].next >= 0) nodes[nodes[pos].next].prev = pos;
    if (nodes[pos].prev >= 0)
      if (const MergeEntry* p = FindMerge(nodes[nodes[pos].prev].id, nodes[pos].id))
        heap.push({p->rank, static_cast<uint32_t>(nodes[pos].prev), p->merged});
    if (nodes[pos].next >= 0)
      if (const MergeEntry* q = FindMerge(nodes[pos].id, nodes[nodes[pos].next].id))
        heap.push({q->rank, static_cast<uint32_t>(pos), q->merged});
  }
  sym.clear();
  for (int32_t i = 0; i >= 0 && i < n; i = nodes[i].next) sym.push_back(nodes[i].id);
}

void BpeModel::EncodeUncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(std::string(piece));
    if (it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  sym.clear();
  bool pending_unk = false;  // fuse_unk: consecutive unknown symbols become one unk
  for (unsigned char c : piece) {
    int32_t id = byte_id_[c];
    if (id >= 0) {
      pending_unk = false;
      sym.push_back(id);
    } else if (unk_id_ >= 0) {
      // HF (BPE::merge_word): an unknown character becomes the unk token; without an
      // unk token it is dropped. Byte-level vocabs normally hold all 256 bytes.
      if (!(fuse_unk_ && pending_unk)) sym.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (sym.size() <= 64) MergeSmall(sym);
  else MergeLarge(sym);
  out.insert(out.end(), sym.begin(), sym.end());
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kCacheMaxBytes) {
    EncodeUncached(piece, out);
    return;
  }
  PieceCache& cache = ThreadCache(uid_);
  uint64_t h = HashBytes(piece);
  CacheSlot& slot = cache.slots[h & (kCacheSlots - 1)];
  if (slot.hash == h && slot.key_len == piece.size() && std::memcmp(slot.key, piece.data(), piece.size()) == 0) {
    out.insert(out.end(), slot.ids, slot.ids + slot.n_ids);
    return;
  }
  size_t before = out.size();
  EncodeUncached(piece, out);
  size_t n = out.size() - before;
  if (n <= kCacheMaxIds) {
    slot.hash = h;
    slot.key_len = static_cast<uint8_t>(piece.size());
    slot.n_ids = static_cast<uint8_t>(n);
    std::memcpy(slot.key, piece.data(), piece.size());
    std::copy(out.begin() + before, out.end(), slot.ids);
  }
}

}  // namespace m2::text
