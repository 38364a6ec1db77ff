// Heap allocations of a CPU decode step (issue #3: "no per-call allocation on hot paths"). This binary replaces the
// global operator new with a counting one (it counts only while a step is measured, from every thread: the pool's
// workers too). After a prefill and a few decode steps have grown the models' scratch, a decode step may allocate
// only the logits vector it returns (the test replays steps after a rollback, below). Both toys (V4 and V4.1, f32
// and q4tp), one and three threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv4_forward.hpp"
#include "toy_model_dir.hpp"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocs{0};

void* counted(std::size_t n, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return counted(n, 0); }
void* operator new[](std::size_t n) { return counted(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {
using namespace cmfx::driver;
namespace fs = std::filesystem;

// Allocations while f runs.
template <class F>
uint64_t allocations_in(F&& f) {
  g_allocs = 0;
  g_counting = true;
  f();
  g_counting = false;
  return g_allocs.load();
}

// This process's toys (removed at exit), one directory per architecture.
std::string toy(const std::string& arch, const std::string& quant) {
  static const cmfx::test::toy_model_dir v4("alloc-v4", "v4"), v41("alloc-v41", "v41");
  return (arch == "v41" ? v41 : v4).make(arch + "-" + quant + ".cmf", "", quant);
}

std::vector<uint32_t> ids(uint64_t n, uint64_t vocab) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> v(n);
  for (auto& x : v) x = uint32_t(rng() % vocab);
  return v;
}

// Prefill 40 tokens and decode 16 more (past ratio-4 windows: the compressors close groups), which grows the
// model's scratch and the state to these sizes; roll the state back 16 positions (the most truncate allows) and
// decode the same 16 tokens again, counting: a step at a context length the model has seen may allocate only the
// logits vector it returns. (A first visit to a longer context may still grow buffers, geometrically.)
template <class Model, class Logits>
void check_decode(Model& m, unsigned threads, const char* what) {
  constexpr uint64_t prompt = 40, steps = 16;
  auto st = m.new_state();
  const auto tok = ids(prompt + steps, m.config().vocab);
  const auto step = [&](uint64_t t) { return m.forward(std::span<const uint32_t>(tok.data() + t, 1), st, Logits::last); };
  m.forward(std::span<const uint32_t>(tok.data(), prompt), st, Logits::last);
  std::vector<std::vector<float>> first;
  for (uint64_t t = prompt; t < prompt + steps; ++t) first.push_back(step(t));
  st.truncate(prompt);
  uint64_t worst = 0;
  for (uint64_t t = prompt; t < prompt + steps; ++t) {
    std::vector<float> out;
    const uint64_t n = allocations_in([&] { out = step(t); });
    worst = std::max(worst, n);
    EXPECT_LE(n, 1u) << what << ", " << threads << " threads, position " << t << ": allocations beyond the logits";
    EXPECT_EQ(out, first[t - prompt]) << what << ": the replayed step differs";  // the rollback itself is exact
  }
  std::printf("%s, %u threads: at most %llu allocation(s) per replayed decode step\n", what, threads,
              (unsigned long long)worst);
}

// Each toy of `arch` (f32, q4tp) at one and three threads.
template <class Model, class Options, class Logits>
void check_arch(const std::string& arch) {
  for (const char* q : {"f32", "q4tp"})
    for (unsigned threads : {1u, 3u}) {
      Options o;
      o.threads = threads;
      auto m = Model::open(toy(arch, q), o);
      check_decode<Model, Logits>(*m, threads, q);
    }
}

TEST(DecodeAllocations, V4StepAllocatesOnlyItsLogits) { check_arch<dsv4_model, dsv4_options, dsv4_logits>("v4"); }
TEST(DecodeAllocations, V41StepAllocatesOnlyItsLogits) { check_arch<dsv41_model, dsv41_options, dsv41_logits>("v41"); }

// The counter itself: a test that could not fail would prove nothing.
TEST(DecodeAllocations, CounterSeesAnAllocation) {
  static std::vector<int>* volatile sink = nullptr;  // the allocations escape: not elided
  const uint64_t n = allocations_in([] { sink = new std::vector<int>(100); });
  delete sink;
  EXPECT_EQ(n, 2u);
}

}  // namespace
