// The driver's prompt cache (driver/generate.cpp) on a V4.1 toy under the official stale index-key rule, where how a
// prompt is split into calls changes the result unless the calls are marked as one prefill:
//   1. a prompt longer than prompt_cache's 512-token pieces is the official ONE prefill call (spec §5.1):
//      prompt_cache marks the whole prompt (dsv41_state::mark_prefill / the GPU graph's) before running the pieces;
//   2. a follow-up turn (the first prompt + the tokens generated after it + new tokens, as a chat's next request)
//      reuses only the first prompt's prefill positions (model/prefix_reuse.hpp): the reply, generated as decode
//      steps, runs again inside the new prompt's prefill — the official code prefills every prompt from position 0.
// Each against one forward() of the whole prompt on a fresh state, bit for bit (the CPU graph's results do not
// depend on how a prefill is split; the GPU runners use prefill chunks of 8, which end at the same positions either
// way), and against what the unmarked / fully reused calls give (they must differ, so a lost mark or a reuse past
// the prefill fails the case).
#include <cmath>
#include <random>

#include "generate.hpp"
#include "harness.hpp"
#include "model/dsv41_forward.hpp"
#include "model/gpu_runner.hpp"
#include "model_toys.hpp"

namespace cmfx::parity {

namespace {

using namespace cmfx::driver;

constexpr uint64_t kPrompt = 600;  // 512 + 88: two prompt_cache pieces
constexpr uint64_t kReply = 5, kMore = 35;  // the follow-up: kPrompt + kReply generated + kMore new = 640 positions

/// max |a − b| / max |b|.
double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return m > 0 ? d / m : d;
}

std::vector<uint32_t> random_ids(std::mt19937_64& g, uint64_t n, uint32_t vocab) {
  std::vector<uint32_t> ids(n);
  for (uint32_t& x : ids) x = std::uniform_int_distribution<uint32_t>(0, vocab - 1)(g);
  return ids;
}

/// The first prompt, and the follow-up (the first prompt, kReply "generated" ids, kMore new ones).
struct turns {
  std::vector<uint32_t> first, second;
  turns(uint64_t seed, uint32_t vocab) {
    std::mt19937_64 g(seed);
    first = random_ids(g, kPrompt, vocab);
    second = first;
    const std::vector<uint32_t> more = random_ids(g, kReply + kMore, vocab);
    second.insert(second.end(), more.begin(), more.end());
  }
  std::span<const uint32_t> reply() const { return std::span<const uint32_t>(second).subspan(kPrompt, kReply); }
};

/// Runs both turns through a prompt cache as `cmfx run -i` would: the first prompt, kReply steps, the follow-up.
/// Returns the logits of each prompt's last token; `reused` gets the follow-up's reused positions.
template <class Model>
std::pair<std::vector<float>, std::vector<float>> cached_turns(Model& m, const turns& t, uint64_t& reused) {
  prompt_cache pc(m);
  pc.set_prefill_piece(prefill_chunk);  // the CPU graphs' pieces on the GPU runner too (it takes a prompt in one call)
  uint64_t r0 = 0;
  std::vector<float> a = pc.prefill(t.first, r0);
  for (const uint32_t id : t.reply()) (void)pc.step(id);
  std::vector<float> b = pc.prefill(t.second, reused);
  return {std::move(a), std::move(b)};
}

std::string note(const char* where, double unmarked, double reused_all) {
  char b[240];
  std::snprintf(b, sizeof b,
                "%s%llu-token prompt in pieces of %llu == one call, follow-up of %llu reusing %llu == one call; "
                "unmarked pieces: max rel %.3g, the reply reused as decode steps: %.3g",
                where, (unsigned long long)kPrompt, (unsigned long long)prefill_chunk,
                (unsigned long long)(kPrompt + kReply + kMore), (unsigned long long)kPrompt, unmarked, reused_all);
  return b;
}

std::string cpu_case(const std::string& path, uint64_t seed, std::string& info) {
  dsv41_options co;
  co.threads = 1;
  co.qat_kv = false;  // the unquantised cache: the picks the stale rule changes are not hidden behind FP4 ties
  auto m = dsv41_model::open(path, co);
  const turns t(seed, m->config().vocab);
  auto one_call = [&](const std::vector<uint32_t>& ids) {
    dsv41_state st = m->new_state();
    return m->forward(ids, st, dsv41_logits::last);
  };
  const std::vector<float> want1 = one_call(t.first), want2 = one_call(t.second);
  uint64_t reused = 0;
  const auto [got1, got2] = cached_turns(*m, t, reused);
  if (got1 != want1)
    return "prompt_cache's logits differ from one forward() (max rel " + std::to_string(max_rel(got1, want1)) + ")";
  if (reused != kPrompt) return "the follow-up reused " + std::to_string(reused) + " positions, not the first prompt's";
  if (got2 != want2)
    return "the follow-up's logits differ from one forward() (max rel " + std::to_string(max_rel(got2, want2)) + ")";
  // What a lost mark would give (the pieces after the first as decode steps), and a reuse past the prefill (the
  // reply and the new tokens as decode steps after the first prompt's prefill).
  dsv41_state st = m->new_state(), st2 = m->new_state();
  (void)m->forward(std::span<const uint32_t>(t.first).first(prefill_chunk), st, dsv41_logits::none);
  const std::vector<float> unmarked =
      m->forward(std::span<const uint32_t>(t.first).subspan(prefill_chunk), st, dsv41_logits::last);
  (void)m->forward(t.first, st2, dsv41_logits::none);
  const std::vector<float> decode_steps =
      m->forward(std::span<const uint32_t>(t.second).subspan(kPrompt), st2, dsv41_logits::last);
  const double r1 = max_rel(unmarked, want1), r2 = max_rel(decode_steps, want2);
  if (r1 < 1e-4 || r2 < 1e-4) return "the unmarked or fully reused calls match one prefill too: no test";
  info = note("", r1, r2);
  return {};
}

std::string gpu_case(const std::string& path, uint64_t seed, std::string& info) {
  gpu_run_options o;
  o.max_ctx = kPrompt + kReply + kMore + 8;
  o.prefill_chunk = 8;  // chunks end at the same positions in every way the prompts are run below
  o.gemm = gpu::gemm_precision::f32;
  auto cached = gpu_runner::open(path, o), whole = gpu_runner::open(path, o);
  if (!cached->is_v41()) return "the V4.1 toy did not open as V4.1";
  const turns t(seed, cached->config().vocab);
  const std::vector<float> want1 = whole->forward(t.first, true);
  whole->model().reset();
  const std::vector<float> want2 = whole->forward(t.second, true);
  uint64_t reused = 0;
  const auto [got1, got2] = cached_turns(*cached, t, reused);
  const gpu_prefill_stats ps = cached->model().last_prefill();
  if (ps.chunks != (kReply + kMore) / 8)
    return "the follow-up's positions after the reused prefix ran " + std::to_string(ps.chunks) +
           " prefill chunks, not 5";
  if (got1 != want1)
    return "prompt_cache's logits differ from one forward() (max rel " + std::to_string(max_rel(got1, want1)) + ")";
  if (reused != kPrompt) return "the follow-up reused " + std::to_string(reused) + " positions, not the first prompt's";
  if (got2 != want2)
    return "the follow-up's logits differ from one forward() (max rel " + std::to_string(max_rel(got2, want2)) + ")";
  {  // the GPU runner's own pieces (cache_backend::prefill_piece): the whole prompt in one call, its chunks pipelined
    cached->model().reset();  // a new prompt_cache starts from a fresh state
    prompt_cache pc(*cached);
    uint64_t r = 0;
    const std::vector<float> one = pc.prefill(t.first, r);
    if (cached->model().last_prefill().chunks != kPrompt / 8)
      return "prompt_cache's default ran the GPU prompt's last call in " +
             std::to_string(cached->model().last_prefill().chunks) + " chunks, not the whole prompt's 75";
    if (one != want1)
      return "prompt_cache's one call differs from forward() (max rel " + std::to_string(max_rel(one, want1)) + ")";
  }
  whole->model().reset();  // the unmarked pieces
  (void)whole->forward(std::span<const uint32_t>(t.first).first(prefill_chunk), false);
  const std::vector<float> unmarked = whole->forward(std::span<const uint32_t>(t.first).subspan(prefill_chunk), true);
  if (whole->model().last_prefill().chunks != 0) return "the unmarked second piece ran in prefill chunks";
  whole->model().reset();  // the first prompt's prefill, then the reply and the new tokens as decode steps
  (void)whole->forward(t.first, false);
  const std::vector<float> decode_steps = whole->forward(std::span<const uint32_t>(t.second).subspan(kPrompt), true);
  const double r1 = max_rel(unmarked, want1), r2 = max_rel(decode_steps, want2);
  if (r1 < 1e-4 || r2 < 1e-4) return "the unmarked or fully reused calls match one prefill too: no test";
  info = note((cached->device_name() + ", chunks of 8: ").c_str(), r1, r2);
  return {};
}

}  // namespace

void prompt_cache_cases(suite& s) {
  toy_files files;
  s.run("prompt_cache", "-", "V4.1 cmf f32 toy, CPU: a 600-token prompt in 512-token pieces and a follow-up turn",
        [&](uint64_t seed, std::string& info) { return cpu_case(files.make("cmf", "f32", "v41"), seed, info); });
  s.run("prompt_cache", "-", "V4.1 cmf f32 toy, GPU runner: a 600-token prompt in 512-token pieces and a follow-up turn",
        [&](uint64_t seed, std::string& info) { return gpu_case(files.make("cmf", "f32", "v41"), seed, info); });
}

}  // namespace cmfx::parity
