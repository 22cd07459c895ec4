// m2 bench --spec: speculative decoding against plain decoding (cmd_bench_spec.cpp).
#pragma once

#include <string>

#include "model/model.h"
#include "runtime/speculative.h"

namespace m2::cli {

// Prints (or, json, emits) the table; returns the exit status (1 if a run failed or an
// output differed from plain decoding).
int RunSpecBench(Model& m, const std::string& model_dir, const runtime::SpecOptions& spec, int tokens, bool json);

}  // namespace m2::cli
