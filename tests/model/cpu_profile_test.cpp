// The CPU forward pass's phase profile (driver/model/cpu_profile.hpp, `cmfx bench --backend cpu --profile`):
//   - nested scopes charge exclusive time (a fake clock: exact sums), a null profile is a no-op;
//   - attached to the tiny V4 and V4.1 synthetic models, every phase the architecture has is charged with the call
//     counts the graph implies (mHC four times a layer, attention / router / experts once, Engram on its layers),
//     the phases that do not exist stay at zero, and the logits are bit-identical to a run without a profile;
//   - a detached profile is charged nothing more.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/cpu_profile.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv41_synthetic.hpp"
#include "model/dsv4_forward.hpp"
#include "model/dsv4_synthetic.hpp"

using namespace cmfx;
using namespace cmfx::driver;

namespace {

double fake_now_value = 0;
double fake_now() { return fake_now_value; }

size_t at(cpu_phase p) { return size_t(p); }

TEST(CpuProfile, NestedScopesChargeExclusiveTime) {
  cpu_profile p;
  p.now = &fake_now;
  fake_now_value = 100;
  {
    cpu_phase_scope a(&p, cpu_phase::attention);  // 100 .. 110
    fake_now_value = 102;
    {
      cpu_phase_scope d(&p, cpu_phase::dense);  // 102 .. 105
      fake_now_value = 105;
    }
    fake_now_value = 106;
    {
      cpu_phase_scope d(&p, cpu_phase::dense);  // 106 .. 107.5, with a nested 106.5 .. 107 experts scope
      fake_now_value = 106.5;
      {
        cpu_phase_scope e(&p, cpu_phase::experts);
        fake_now_value = 107;
      }
      fake_now_value = 107.5;
    }
    fake_now_value = 110;
  }
  {
    cpu_phase_scope m(&p, cpu_phase::mhc);  // 110 .. 111.25, at top level again
    fake_now_value = 111.25;
  }
  EXPECT_DOUBLE_EQ(p.seconds[at(cpu_phase::attention)], 10.0 - 3.0 - 1.5);
  EXPECT_DOUBLE_EQ(p.seconds[at(cpu_phase::dense)], 3.0 + 1.0);
  EXPECT_DOUBLE_EQ(p.seconds[at(cpu_phase::experts)], 0.5);
  EXPECT_DOUBLE_EQ(p.seconds[at(cpu_phase::mhc)], 1.25);
  EXPECT_DOUBLE_EQ(p.total(), 11.25);
  EXPECT_EQ(p.calls[at(cpu_phase::attention)], 1u);
  EXPECT_EQ(p.calls[at(cpu_phase::dense)], 2u);
  EXPECT_EQ(p.calls[at(cpu_phase::experts)], 1u);
  EXPECT_EQ(p.open_children, nullptr);
  {
    cpu_phase_scope none(nullptr, cpu_phase::head);
    fake_now_value = 200;
  }
  EXPECT_DOUBLE_EQ(p.total(), 11.25);
  p.reset();
  EXPECT_EQ(p.total(), 0.0);
  EXPECT_EQ(p.calls[at(cpu_phase::dense)], 0u);
}

TEST(CpuProfile, PhaseNamesAreDistinctAndComplete) {
  ASSERT_EQ(cpu_phase_names.size(), size_t(cpu_phase::count));
  for (size_t i = 0; i < cpu_phase_names.size(); ++i) {
    EXPECT_FALSE(cpu_phase_names[i].empty());
    for (size_t j = 0; j < i; ++j) EXPECT_NE(cpu_phase_names[i], cpu_phase_names[j]);
  }
}

/// Runs a prompt of 5 and 3 decode steps; the steps with `prof` attached (nullptr: none). Returns every logit.
template <class Model, class Logits>
std::vector<float> run_steps(Model& m, Logits last, uint32_t vocab, cpu_profile* prof) {
  auto st = m.new_state();
  std::vector<uint32_t> prompt = {3, 141, 59, 265, 358};
  for (auto& t : prompt) t %= vocab;
  std::vector<float> all = m.forward(prompt, st, last);
  m.set_profile(prof);
  uint32_t tok = 7 % vocab;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> l = m.forward(std::span<const uint32_t>(&tok, 1), st, last);
    all.insert(all.end(), l.begin(), l.end());
    tok = (tok * 31 + 17) % vocab;
  }
  m.set_profile(nullptr);
  (void)m.forward(std::span<const uint32_t>(&tok, 1), st, last);  // detached: charges nothing
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The tiny preset of a synthetic model (q4tp experts) on 2 threads.
template <class Model, class Options, class SynthOptions, class Synth>
Model tiny_model(Synth synth) {
  SynthOptions so;
  so.preset = "tiny";
  so.experts = format::q4tp;
  Options mo;
  mo.threads = 2;
  return Model(synth(so), mo);
}

TEST(CpuProfile, V4ToyChargesEveryPhaseItHas) {
  dsv4_model m = tiny_model<dsv4_model, dsv4_options, dsv4_synth_options>(&dsv4_synthetic);
  const uint32_t L = m.config().layers, V = m.config().vocab;
  const std::vector<float> plain = run_steps(m, dsv4_logits::last, V, nullptr);
  cpu_profile p;
  const std::vector<float> profiled = run_steps(m, dsv4_logits::last, V, &p);
  EXPECT_TRUE(same_bits(plain, profiled)) << "a profile must not change the logits";
  const uint64_t steps = 3;
  EXPECT_EQ(p.calls[at(cpu_phase::embed)], steps);
  EXPECT_EQ(p.calls[at(cpu_phase::mhc)], steps * 4 * L);
  EXPECT_EQ(p.calls[at(cpu_phase::attention)], steps * L);
  EXPECT_EQ(p.calls[at(cpu_phase::router)], steps * L);
  EXPECT_EQ(p.calls[at(cpu_phase::experts)], steps * L);
  EXPECT_EQ(p.calls[at(cpu_phase::head)], steps);
  EXPECT_GE(p.calls[at(cpu_phase::dense)], steps * L * 5) << "wq_a, wq_b, wkv, wo_a, wo_b at least";
  EXPECT_EQ(p.calls[at(cpu_phase::engram)], 0u);
  EXPECT_EQ(p.seconds[at(cpu_phase::engram)], 0.0);
  for (cpu_phase ph : {cpu_phase::mhc, cpu_phase::attention, cpu_phase::dense, cpu_phase::experts, cpu_phase::head})
    EXPECT_GT(p.seconds[at(ph)], 0.0) << cpu_phase_names[at(ph)];
  for (double s : p.seconds) EXPECT_GE(s, 0.0);
}

TEST(CpuProfile, V41ToyChargesEngramToo) {
  dsv41_model m = tiny_model<dsv41_model, dsv41_options, dsv41_synth_options>(&dsv41_synthetic);
  const dsv41_config& c = m.config();
  uint64_t engram_layers = 0;
  for (uint32_t l = 0; l < c.layers; ++l) engram_layers += c.plan[l].engram >= 0;
  ASSERT_GT(engram_layers, 0u);
  const std::vector<float> plain = run_steps(m, dsv41_logits::last, c.vocab, nullptr);
  cpu_profile p;
  const std::vector<float> profiled = run_steps(m, dsv41_logits::last, c.vocab, &p);
  EXPECT_TRUE(same_bits(plain, profiled)) << "a profile must not change the logits";
  const uint64_t steps = 3;
  EXPECT_EQ(p.calls[at(cpu_phase::mhc)], steps * 4 * c.layers);
  EXPECT_EQ(p.calls[at(cpu_phase::attention)], steps * c.layers);
  EXPECT_EQ(p.calls[at(cpu_phase::experts)], steps * c.layers);
  EXPECT_EQ(p.calls[at(cpu_phase::engram)], steps * engram_layers);
  EXPECT_EQ(p.calls[at(cpu_phase::head)], steps);
  EXPECT_GT(p.seconds[at(cpu_phase::engram)], 0.0);
}

}  // namespace
