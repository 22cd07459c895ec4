// libFuzzer target: any bytes as config.json either fail with a Status or give a config
// whose sizes are consistent (the forward pass relies on these).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "io/json_file.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto j = m2::ParseJson(std::string_view(reinterpret_cast<const char*>(data), size), "input");
  if (!j.ok()) return 0;
  auto c = m2::ParseModelConfig(*j);
  if (!c.ok()) return 0;
  if (c->num_attention_heads % c->num_key_value_heads != 0 || c->num_experts_per_tok > c->num_local_experts ||
      c->rotary_dim <= 0 || c->rotary_dim > c->head_dim || c->rotary_dim % 2 != 0 || c->hidden_size <= 0)
    std::abort();
  return 0;
}
