#pragma once
/// @file chat_parse.hpp
/// @brief Splits DeepSeek-V4 model output, as it streams, into reasoning, content and DSML tool calls.
///
/// @code
///   cmfx::chat_output_parser p(cmfx::chat_mode::thinking);   // the prompt ended with <｜Assistant｜><think>
///   for (each decoded chunk) { cmfx::chat_delta d = p.feed(chunk); send(d.reasoning, d.content, d.tool_calls); }
///   cmfx::chat_delta last = p.finish();                        // end of generation (EOS id, max tokens, stop)
/// @endcode
///
/// Grammar of the output (the official parser parse_message_from_completion_text / parse_tool_calls of
/// encoding_dsv4.py, see chat.hpp for where it was read):
///   thinking: {reasoning}</think>{content}[\n\n<｜DSML｜tool_calls>…</｜DSML｜tool_calls>]<｜end▁of▁sentence｜>
///   chat:     {content}[\n\n<｜DSML｜tool_calls>…</｜DSML｜tool_calls>]<｜end▁of▁sentence｜>
///   block:    <｜DSML｜invoke name="NAME">\n
///               <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>\n …
///             </｜DSML｜invoke>\n …
/// A call's arguments are rebuilt as the official decode_dsml_to_arguments does: `{"KEY": VALUE, …}` joined by
/// ", ", string="true" values JSON-quoted (Python json.dumps, ensure_ascii=False), string="false" values verbatim.
///
/// Where this parser is more forgiving than the official one (which asserts), following the fixes listed in
/// spec serving.md §1.3:
///   - a tool-call block that opens before </think> ends the reasoning (the model went to DSML without closing it);
///   - the "\n\n" before a block is dropped (part of the official start marker); a block without it is accepted;
///   - any whitespace separates the DSML elements (the official wants exactly "\n");
///   - stray <think>, </think> and BOS in content, and <think> and BOS in reasoning, are dropped, never shown;
///   - text after a closed block returns to content; a malformed block is skipped up to its close (or EOS) and
///     reported in warnings(); an unfinished call at the end is discarded, never emitted with made-up arguments;
///   - a string="false" value that is not valid JSON is JSON-quoted (the official output would not be JSON);
///   - a repeated parameter name keeps the first value (the official raises).
/// Markers split across chunks are handled by holding back any tail that could start one; at finish() a held
/// tail containing "<｜" (an unfinished marker) is discarded, any other is released as text.
/// Tool call ids are not in the model output: they are `id_prefix` + a running number unless the caller renames.
#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cmfx/core/marker_scan.hpp"
#include "cmfx/text/chat.hpp"
#include "cmfx/text/py_json.hpp"

namespace cmfx {

/// What one feed()/finish() produced: text to append to reasoning_content and content, and completed tool calls.
struct chat_delta {
  std::string reasoning;
  std::string content;
  std::vector<chat_tool_call> tool_calls;
  bool finished = false;  // EOS seen, or finish() called
  bool empty() const noexcept { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class chat_output_parser {
 public:
  /// mode: how the prompt ended (thinking: with <think>, so output starts in the reasoning).
  explicit chat_output_parser(chat_mode mode, std::string id_prefix = "call_")
      : state_(mode == chat_mode::thinking ? st::reasoning : st::content), id_prefix_(std::move(id_prefix)) {}

  /// Consumes a chunk of decoded text (any split, even inside a UTF-8 character); appends its effect to out.
  void feed(std::string_view text, chat_delta& out) {
    if (state_ == st::done) return;
    buf_.append(text);
    run(out);
  }
  chat_delta feed(std::string_view text) {
    chat_delta d;
    feed(text, d);
    return d;
  }

  /// End of the generation: releases held-back text, discards an unfinished tool call. Further feeds do nothing.
  void finish(chat_delta& out) {
    if (state_ == st::reasoning || state_ == st::content) {
      if (buf_.find("<｜") != std::string::npos) {
        warn("unfinished marker at the end discarded");
      } else {
        (state_ == st::reasoning ? out.reasoning : out.content) += buf_;
      }
    } else if (state_ != st::done) {
      if (state_ != st::block || buf_.find_first_not_of(" \t\r\n") != std::string::npos)
        warn("unfinished tool call discarded at the end");
      warn("tool-call block not closed before the end");
    }
    buf_.clear();
    state_ = st::done;
    out.finished = true;
  }
  chat_delta finish() {
    chat_delta d;
    finish(d);
    return d;
  }

  bool done() const noexcept { return state_ == st::done; }
  bool in_reasoning() const noexcept { return state_ == st::reasoning; }
  bool in_tool_calls() const noexcept { return state_ != st::reasoning && state_ != st::content && state_ != st::done; }
  size_t tool_call_count() const noexcept { return calls_; }
  /// Malformed or unfinished markup met so far (the output itself never contains it).
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }

 private:
  enum class st { reasoning, content, block, invoke_head, invoke_body, param, skip, done };

  static constexpr std::string_view nn_block_open = "\n\n<｜DSML｜tool_calls>";
  static constexpr std::array<std::string_view, 6> reasoning_markers = {
      chat_tokens::think_close, nn_block_open, chat_tokens::tool_calls_open, chat_tokens::think_open,
      chat_tokens::eos,         chat_tokens::bos};
  static constexpr std::array<std::string_view, 6> content_markers = {
      nn_block_open,          chat_tokens::tool_calls_open, chat_tokens::think_close, chat_tokens::think_open,
      chat_tokens::eos,       chat_tokens::bos};

  void warn(std::string w) { warnings_.push_back(std::move(w)); }
  void enter(st s) {
    state_ = s;
    scan_from_ = 0;
  }
  void consume(size_t n) { buf_.erase(0, n); }

  // Scans buf_ for the markers, resuming where the last unsuccessful scan stopped; false: need more text.
  template <size_t N>
  bool scan(const std::array<std::string_view, N>& markers, marker_hit& hit) {
    hit = find_first_marker(buf_, markers, scan_from_);
    if (hit.found()) return true;
    size_t longest = 0;
    for (const auto m : markers) longest = std::max(longest, m.size());
    scan_from_ = buf_.size() >= longest ? buf_.size() - longest + 1 : 0;
    return false;
  }

  // Skips whitespace, then matches one of the expected markers at the start of buf_: its index, -1 when buf_ may
  // still become one (need more text), -2 when it cannot (malformed).
  template <size_t N>
  int expect(const std::array<std::string_view, N>& markers) {
    const size_t ws = buf_.find_first_not_of(" \t\r\n");
    consume(ws == std::string::npos ? buf_.size() : ws);
    if (buf_.empty()) return -1;
    bool partial = false;
    for (size_t i = 0; i < N; ++i) {
      if (buf_.size() >= markers[i].size() && buf_.compare(0, markers[i].size(), markers[i]) == 0) {
        consume(markers[i].size());
        return static_cast<int>(i);
      }
      partial = partial || is_prefix_of(buf_, markers[i]);
    }
    return partial ? -1 : -2;
  }

  void malformed(const std::string& what) {
    warn("malformed tool-call block (" + what + "): skipped to its end");
    name_.clear();
    params_.clear();
    enter(st::skip);
  }

  void end_of_sequence(chat_delta& out) {
    if (state_ != st::reasoning && state_ != st::content && state_ != st::skip) {
      if (state_ != st::block) warn("unfinished tool call discarded at the end");
      warn("tool-call block not closed before the end");
    }
    buf_.clear();
    state_ = st::done;
    out.finished = true;
  }

  // Text states: release everything before the first marker (or all but a possible partial marker).
  template <size_t N>
  bool run_text(const std::array<std::string_view, N>& markers, std::string& sink, chat_delta& out) {
    const marker_hit hit = find_first_marker(buf_, markers);
    if (!hit.found()) {
      const size_t keep = partial_marker_suffix(buf_, markers);
      sink.append(buf_, 0, buf_.size() - keep);
      consume(buf_.size() - keep);
      return false;
    }
    sink.append(buf_, 0, hit.pos);
    const std::string_view m = markers[hit.which];
    consume(hit.pos + m.size());
    if (m == chat_tokens::eos) {
      end_of_sequence(out);
    } else if (m == chat_tokens::think_close && state_ == st::reasoning) {
      enter(st::content);
    } else if (m == nn_block_open || m == chat_tokens::tool_calls_open) {
      enter(st::block);
    }  // else: a stray <think>, </think> or BOS, dropped
    return true;
  }

  static bool parse_invoke_head(std::string_view h, std::string& name) {
    const size_t b = h.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return false;
    h.remove_prefix(b);
    const size_t e = h.find_last_not_of(" \t\r\n");
    h = h.substr(0, e + 1);
    constexpr std::string_view pre = "name=\"", post = "\">";
    if (h.size() < pre.size() + post.size() || h.substr(0, pre.size()) != pre || h.substr(h.size() - post.size()) != post)
      return false;
    name.assign(h.substr(pre.size(), h.size() - pre.size() - post.size()));
    return true;
  }

  // ` name="KEY" string="true|false">VALUE` → key, flag, value (the name is the shortest that fits, as the
  // official non-greedy regex).
  bool add_param(std::string_view p) {
    const size_t b = p.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return false;
    p.remove_prefix(b);
    constexpr std::string_view pre = "name=\"", t = "\" string=\"true\">", f = "\" string=\"false\">";
    if (p.substr(0, pre.size()) != pre) return false;
    const size_t pt = p.find(t, pre.size()), pf = p.find(f, pre.size());
    if (pt == std::string_view::npos && pf == std::string_view::npos) return false;
    const bool is_str = pt < pf;
    const size_t at = is_str ? pt : pf;
    const std::string_view key = p.substr(pre.size(), at - pre.size());
    const std::string_view value = p.substr(at + (is_str ? t.size() : f.size()));
    for (const auto& kv : params_)
      if (kv.first == key) {
        warn("repeated parameter \"" + std::string(key) + "\" in a call to " + name_ + ": later value ignored");
        return true;
      }
    std::string json;
    if (is_str) {
      text::py_json_append_string(json, value);
    } else if (nlohmann::json::accept(value)) {
      json.assign(value);
    } else {
      warn("parameter \"" + std::string(key) + "\" of " + name_ + " is marked string=\"false\" but is not JSON: quoted");
      text::py_json_append_string(json, value);
    }
    params_.emplace_back(std::string(key), std::move(json));
    return true;
  }

  void emit_call(chat_delta& out) {
    chat_tool_call c;
    c.id = id_prefix_ + std::to_string(calls_++);
    c.name = std::move(name_);
    c.arguments = "{";
    for (size_t i = 0; i < params_.size(); ++i) {
      if (i) c.arguments += ", ";
      text::py_json_append_string(c.arguments, params_[i].first);
      c.arguments += ": ";
      c.arguments += params_[i].second;
    }
    c.arguments += "}";
    out.tool_calls.push_back(std::move(c));
    name_.clear();
    params_.clear();
  }

  void run(chat_delta& out) {
    static constexpr std::array<std::string_view, 3> between = {chat_tokens::invoke_open,
                                                                chat_tokens::tool_calls_close, chat_tokens::eos};
    static constexpr std::array<std::string_view, 3> head_end = {chat_tokens::parameter_open,
                                                                 chat_tokens::invoke_close, chat_tokens::eos};
    static constexpr std::array<std::string_view, 2> param_end = {chat_tokens::parameter_close, chat_tokens::eos};
    static constexpr std::array<std::string_view, 2> skip_end = {chat_tokens::tool_calls_close, chat_tokens::eos};
    for (;;) {
      marker_hit hit;
      switch (state_) {
        case st::done: return;
        case st::reasoning:
          if (!run_text(reasoning_markers, out.reasoning, out)) return;
          break;
        case st::content:
          if (!run_text(content_markers, out.content, out)) return;
          break;
        case st::block: {
          const int k = expect(between);
          if (k == -1) return;
          if (k == -2) malformed("expected <｜DSML｜invoke or </｜DSML｜tool_calls>");
          else if (k == 0) enter(st::invoke_head);
          else if (k == 1) enter(st::content);
          else end_of_sequence(out);
          break;
        }
        case st::invoke_head: {
          if (!scan(head_end, hit)) return;
          if (hit.which == 2) {
            end_of_sequence(out);
            break;
          }
          const bool ok = parse_invoke_head(std::string_view(buf_).substr(0, hit.pos), name_);
          consume(hit.pos + head_end[hit.which].size());
          if (!ok) malformed("bad invoke name");
          else if (hit.which == 0) enter(st::param);
          else {
            emit_call(out);
            enter(st::block);
          }
          break;
        }
        case st::param: {
          if (!scan(param_end, hit)) return;
          if (hit.which == 1) {
            end_of_sequence(out);
            break;
          }
          const bool ok = add_param(std::string_view(buf_).substr(0, hit.pos));
          consume(hit.pos + param_end[0].size());
          if (!ok) malformed("bad parameter header");
          else enter(st::invoke_body);
          break;
        }
        case st::invoke_body: {
          const int k = expect(head_end);
          if (k == -1) return;
          if (k == -2) malformed("expected <｜DSML｜parameter or </｜DSML｜invoke>");
          else if (k == 0) enter(st::param);
          else if (k == 1) {
            emit_call(out);
            enter(st::block);
          } else {
            end_of_sequence(out);
          }
          break;
        }
        case st::skip: {
          if (!scan(skip_end, hit)) {
            // Nothing before the last possible partial marker can matter: drop it to keep the buffer short.
            const size_t keep = partial_marker_suffix(buf_, skip_end);
            consume(buf_.size() - keep);
            scan_from_ = 0;
            return;
          }
          consume(hit.pos + skip_end[hit.which].size());
          if (hit.which == 1) {
            state_ = st::done;
            out.finished = true;
            buf_.clear();
          } else {
            enter(st::content);
          }
          break;
        }
      }
    }
  }

  st state_;
  std::string id_prefix_;
  std::string buf_;        // text not yet released or parsed
  size_t scan_from_ = 0;   // where the next scan of buf_ may start (the earlier part holds no marker start)
  size_t calls_ = 0;
  std::string name_;       // call being parsed
  std::vector<std::pair<std::string, std::string>> params_;  // (key, JSON value text)
  std::vector<std::string> warnings_;
};

/// A whole completion, parsed in one go (the non-streaming response).
struct chat_completion {
  std::string reasoning_content;
  std::string content;
  std::vector<chat_tool_call> tool_calls;
  std::vector<std::string> warnings;
  bool finished_by_eos = false;  // the text contained EOS
};

inline chat_completion chat_parse_completion(std::string_view text, chat_mode mode, std::string id_prefix = "call_") {
  chat_output_parser p(mode, std::move(id_prefix));
  chat_delta d = p.feed(text);
  chat_completion r;
  r.finished_by_eos = d.finished;
  p.finish(d);
  r.reasoning_content = std::move(d.reasoning);
  r.content = std::move(d.content);
  r.tool_calls = std::move(d.tool_calls);
  r.warnings = p.warnings();
  return r;
}

}  // namespace cmfx
