// m2: run MiniMax-M2 family models. `m2 --help` lists the subcommands.
#include <cstdio>

#include "base/cpu.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "m2 - an inference engine for the MiniMax-M2 model family.\n"
      "Point it at a model folder as published on Hugging Face (config.json + *.safetensors).\n"
      "Run 'm2 <command> --help' for the options of one command."};
  app.require_subcommand(1);
  m2::cli::Runner run;
  m2::cli::AddInspect(app, run);
  m2::cli::AddGenerate(app, run);
  m2::cli::AddChat(app, run);
  m2::cli::AddPerplexity(app, run);
  m2::cli::AddLogits(app, run);
  m2::cli::AddTokenize(app, run);
  m2::cli::AddChatTools(app, run);
  m2::cli::AddBench(app, run);
  m2::cli::AddMakeBenchModel(app, run);
  m2::cli::AddQuantize(app, run);
  m2::cli::AddServe(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!run) return 0;
  // M2_KERNELS is read by the kernels on first use; a bad value is an error here, before
  // any work, rather than a check failure in the middle of it.
  if (const m2::Status st = m2::CheckKernelsEnv(); !st.ok()) return m2::cli::Fail(st);
  return run();
}
