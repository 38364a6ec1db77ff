#pragma once
// The text side of one generation: sampled ids → UTF-8 text (stream_decoder, special tokens kept so the parser
// sees </think> and ｜DSML｜) → stop strings → (chat) reasoning / content / tool calls (chat_output_parser).
#include <string>
#include <vector>

#include "cmfx/sample/stop_strings.hpp"
#include "cmfx/text/chat_parse.hpp"
#include "cmfx/text/tokenizer.hpp"
#include "serve/job.hpp"

namespace cmfx::driver::serve {

class output_pipeline {
 public:
  output_pipeline(const tokenizer& tok, const gen_request& r)
      : kind_(r.kind), dec_(tok), stops_(r.stop), parser_(r.mode, tool_call_prefix(r.id)) {}

  /// A generated (non-stop) token; appends what became visible to ev. True when the output is over: a stop
  /// string completed or the chat parser saw the end of the message.
  bool push(int32_t id, gen_event& ev) {
    if (kind_ == job_kind::chat && parser_.in_reasoning()) ++reasoning_tokens_;
    const std::string text = dec_.push(id);
    const auto r = stops_.push(text);
    emit(r.text, ev);
    if (r.stopped) stopped_by_string_ = true;
    return r.stopped || (kind_ == job_kind::chat && parser_.done());
  }

  /// End of generation: releases held-back text, ends the parser (an unfinished tool call is dropped).
  void finish(gen_event& ev) {
    if (!stops_.stopped()) {
      const std::string tail = dec_.flush();
      const auto r = stops_.push(tail);
      emit(r.text, ev);
      if (r.stopped) stopped_by_string_ = true;
      emit(stops_.flush(), ev);
    }
    if (kind_ == job_kind::chat && !parser_.done()) {
      chat_delta d;
      parser_.finish(d);
      take(d, ev);
    }
  }

  bool stopped_by_string() const noexcept { return stopped_by_string_; }
  bool saw_end_of_message() const noexcept { return kind_ == job_kind::chat && parser_.done(); }
  size_t tool_calls() const noexcept { return parser_.tool_call_count(); }
  uint64_t reasoning_tokens() const noexcept { return reasoning_tokens_; }

  static std::string tool_call_prefix(const std::string& request_id) {
    const auto dash = request_id.find('-');
    return "call_" + (dash == std::string::npos ? request_id : request_id.substr(dash + 1)) + "_";
  }

 private:
  void emit(std::string_view text, gen_event& ev) {
    if (text.empty()) return;
    if (kind_ == job_kind::completion) {
      ev.content.append(text);
      return;
    }
    chat_delta d;
    parser_.feed(text, d);
    take(d, ev);
  }
  static void take(chat_delta& d, gen_event& ev) {
    ev.reasoning += d.reasoning;
    ev.content += d.content;
    for (auto& c : d.tool_calls) ev.tool_calls.push_back(std::move(c));
  }

  job_kind kind_;
  stream_decoder dec_;
  stop_string_matcher stops_;
  chat_output_parser parser_;
  bool stopped_by_string_ = false;
  uint64_t reasoning_tokens_ = 0;
};

}  // namespace cmfx::driver::serve
