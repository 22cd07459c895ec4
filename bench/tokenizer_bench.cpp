// Tokenizer encode speed on one thread, in MB/s of input text, per group of files.
//
//   tokenizer_bench -t TOKENIZER_JSON_OR_DIR [--min-seconds S] NAME=FILE[,FILE...] ...
//
// Each group's files are encoded one after another (a document at a time, special tokens
// parsed, as a server would), once untimed to warm the per-thread cache, then repeatedly
// for at least --min-seconds; the best pass counts. Prints one line per group:
//   RESULT group=NAME bytes=B tokens=N seconds=T mbps=X
// bench/tokenizer_bench.py runs this and Hugging Face `tokenizers` on the same files and
// prints the ratio.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "bench_args.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

int Usage() {
  std::fprintf(stderr, "usage: tokenizer_bench -t TOKENIZER [--min-seconds S] NAME=FILE[,FILE...] ...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path;
  double min_seconds = 2.0;
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "-t" || a == "--tokenizer") && i + 1 < argc) {
      tokenizer_path = argv[++i];
    } else if (a == "--min-seconds" && i + 1 < argc) {
      if (!m2::bench::ParseDecimal("tokenizer_bench", "--min-seconds", argv[++i], 0.01, 3600, &min_seconds)) return 2;
    } else if (a.find('=') != std::string::npos) {
      std::string name = a.substr(0, a.find('='));
      std::string list = a.substr(a.find('=') + 1);
      std::vector<std::string> files;
      for (size_t p = 0; p <= list.size();) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        if (q > p) files.push_back(list.substr(p, q - p));
        p = q + 1;
      }
      groups.push_back({name, files});
    } else {
      return Usage();
    }
  }
  if (tokenizer_path.empty() || groups.empty()) return Usage();

  auto t0 = Clock::now();
  auto tok = m2::text::Tokenizer::Load(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", tok.status().message().c_str());
    return 1;
  }
  std::printf("loaded %s in %.2f s (%d ids)\n", tokenizer_path.c_str(),
              std::chrono::duration<double>(Clock::now() - t0).count(), (*tok)->vocab_size());

  for (const auto& [name, files] : groups) {
    std::vector<std::string> docs;
    size_t bytes = 0;
    for (const std::string& f : files) {
      auto text = m2::ReadTextFile(f);
      if (!text.ok()) {
        std::fprintf(stderr, "tokenizer_bench: %s\n", text.status().message().c_str());
        return 1;
      }
      bytes += text->size();
      docs.push_back(std::move(*text));
    }
    size_t tokens = 0;
    for (const std::string& d : docs) tokens += (*tok)->Encode(d).size();  // warm-up
    double best = 1e30, total = 0;
    int passes = 0;
    while (total < min_seconds || passes < 3) {
      auto start = Clock::now();
      size_t n = 0;
      for (const std::string& d : docs) n += (*tok)->Encode(d).size();
      double s = std::chrono::duration<double>(Clock::now() - start).count();
      if (n != tokens) {
        std::fprintf(stderr, "tokenizer_bench: token count changed between passes (%zu vs %zu)\n", n, tokens);
        return 1;
      }
      best = std::min(best, s);
      total += s;
      ++passes;
    }
    std::printf("RESULT group=%s bytes=%zu tokens=%zu seconds=%.6f mbps=%.2f\n", name.c_str(), bytes, tokens, best,
                bytes / best / 1e6);
  }
  return 0;
}
