// libFuzzer target: any bytes as a request body of m2 serve go through what a request
// meets before the model: JSON parsing, the OpenAI and Anthropic request parsers, the
// chat template rendering (tool_choice's forced reply included), and the reply side
// (output parser and response building) fed the same bytes as model output. Every path
// must end in a Status or a response, never a crash or an escaping exception.
#include <cstdint>
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "runtime/generator.h"
#include "server/chat_api.h"
#include "server/reply.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  m2::runtime::SamplingParams defaults;
  auto body = m2::chat::ParseOrderedJson(text, "input");
  if (body.ok()) {
    for (int api = 0; api < 2; ++api) {
      auto job = api == 0 ? m2::server::ParseOpenAIChat(*body, defaults)
                          : m2::server::ParseAnthropicMessages(*body, defaults);
      if (!job.ok()) continue;
      std::string forced;
      auto prompt = m2::server::RenderJobPrompt(*job, &forced);
      if (!prompt.ok()) continue;
      m2::server::ReplyConfig rc;
      rc.api = api == 0 ? m2::server::Api::kOpenAI : m2::server::Api::kAnthropic;
      rc.stream = size % 2 == 0;
      rc.parse_tools = true;
      m2::server::ChatReply reply(rc, job->toolset, forced);
      (void)reply.Start();
      (void)reply.OnText(text.substr(0, size / 2));
      (void)reply.OnText(text.substr(size / 2));
      m2::runtime::GenerationResult r;
      (void)reply.Finish(m2::Status::Ok(), r);
      (void)reply.body().dump(-1, ' ', false, m2::chat::Json::error_handler_t::replace);
    }
    (void)m2::server::ParseOpenAICompletion(*body, defaults);
  }
  return 0;
}
