// Recordings of the transfer queue (device::begin_transfer) and the compute queue ordered by sync points alone
// (commands::after): chains of copies and dispatches, each reading what the one before wrote or overwriting what it
// read, submitted back to back before any wait, every byte checked; and the error paths. With
// device_options::transfer_queue (`cmfx-parity --transfer-queue`) on a device with a transfer-only family the
// transfers run on its queue, beside the compute queue; elsewhere on the compute queue, through the same semaphores.
#include <bit>
#include <cstring>

#include "cmfx/core/error.hpp"
#include "harness.hpp"

namespace cmfx::parity {

namespace {

std::string first_mismatch(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i)
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]))
      return std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
             std::to_string(want[i]);
  return {};
}

/// `rounds` chains, every recording submitted before the first wait: x (transfer) copies a → b; c (compute, after x)
/// doubles b in place with a dispatch and copies b → out; y (transfer, after c) copies d → b, overwriting what c
/// read; z (compute, after y) copies b → out2. Then out = 2·a, b = out2 = d, bit for bit, guards intact.
std::string chain_case(suite& s, uint64_t seed, uint64_t n, uint32_t rounds, std::string& info) {
  if (!s.dev.info().timeline) return "the device has no timeline semaphores";
  rng r(seed);
  struct round {
    std::vector<float> a, d;
    gpu::buffer ab, db;
    std::unique_ptr<guarded> b, out, out2;
    std::vector<gpu::commands> recs;
  };
  std::vector<round> rs(rounds);
  for (round& q : rs) {
    q.a = r.normal(n), q.d = r.normal(n);
    q.ab = upload(s.dev, q.a), q.db = upload(s.dev, q.d);
    q.b = std::make_unique<guarded>(s.dev, n * 4);
    q.out = std::make_unique<guarded>(s.dev, n * 4);
    q.out2 = std::make_unique<guarded>(s.dev, n * 4);
  }
  for (round& q : rs) {
    gpu::commands x = s.dev.begin_transfer();
    if (!x.transfer()) return "begin_transfer gave a compute recording";
    const bool stamps = s.dev.info().transfer_timestamps;  // on a transfer queue its pool is reset by the host
    if (stamps) (void)x.timestamp();
    x.copy(q.ab, q.b->payload(), n * 4);
    if (stamps) (void)x.timestamp();
    s.dev.submit_async(x);
    gpu::commands c = s.dev.begin();
    c.after(x.done());
    s.kern.scale(c, q.b->payload(), n, 2.0f);
    c.copy(q.b->payload(), q.out->payload(), n * 4);
    s.dev.submit_async(c);
    gpu::commands y = s.dev.begin_transfer();
    y.after(c.done());
    y.copy(q.db, q.b->payload(), n * 4);
    s.dev.submit_async(y);
    gpu::commands z = s.dev.begin();
    z.after(y.done());
    z.copy(q.b->payload(), q.out2->payload(), n * 4);
    s.dev.submit_async(z);
    for (gpu::commands* g : {&x, &c, &y, &z}) q.recs.push_back(std::move(*g));
  }
  std::string why;
  for (round& q : rs) {
    for (gpu::commands& g : q.recs) s.dev.wait(g);
    if (s.dev.info().transfer_timestamps && !(q.recs[0].seconds(0, 1) >= 0))
      return "the transfer recording's timestamps go backwards";
    std::vector<float> out(n), b(n), out2(n), twice(q.a);
    for (float& v : twice) v *= 2.0f;
    if (!q.out->read(out.data(), why) || !q.b->read(b.data(), why) || !q.out2->read(out2.data(), why)) return why;
    if (auto w = first_mismatch("out (2·a: the dispatch after the transfer)", out, twice); !w.empty()) return w;
    if (auto w = first_mismatch("b (d: the transfer after the dispatch)", b, q.d); !w.empty()) return w;
    if (auto w = first_mismatch("out2 (d: the copy after the transfer)", out2, q.d); !w.empty()) return w;
  }
  const gpu::device_info& di = s.dev.info();
  info = std::to_string(rounds) + " chains of 4 recordings, " +
         (di.transfer_queue ? "transfers on the transfer-only family " + std::to_string(di.transfer_family)
                            : std::string("transfers on the compute queue (") +
                                  (di.transfer_family >= 0 ? "device_options::transfer_queue off"
                                                           : "no transfer-only family") +
                                  ")");
  return {};
}

template <class Fn>
bool throws_gpu_error(Fn&& fn) {
  try {
    fn();
  } catch (const gpu::gpu_error&) {
    return true;
  }
  return false;
}

std::string error_case(suite& s, std::string& info) {
  gpu::commands x = s.dev.begin_transfer();
  if (!throws_gpu_error([&] { (void)x.done(); })) return "done() of an unsubmitted recording did not throw";
  const gpu::sync_point last = s.dev.last_submitted(1);
  if (!throws_gpu_error([&] { x.after({last.queue, last.value + 1}); }))
    return "after() a point not submitted yet did not throw";
  if (!throws_gpu_error([&] { x.after({7, 1}); })) return "after() a point of queue 7 did not throw";
  const gpu::buffer b = s.dev.alloc(64);
  if (!throws_gpu_error([&] { s.kern.scale(x, b, 16, 2.0f); }))
    return "a dispatch in a transfer recording did not throw";
  x.after({last.queue, 0});  // nothing to wait for
  x.fill(b, 64, 0x3F800000u);
  s.submit(x);
  if (x.done().value == 0 || s.dev.last_submitted(1).value < x.done().value) return "done() is not the last submission";
  // the same recording again (its waits were spent), after a compute recording: a new point
  gpu::commands c = s.dev.begin();
  c.fill(b, 64, 0x40000000u);
  s.dev.submit_async(c);
  const gpu::sync_point first = x.done();
  x.after(c.done());
  s.submit(x);
  if (!(first.queue == x.done().queue && x.done().value > first.value)) return "a resubmission kept its old point";
  std::vector<float> back(16);
  s.dev.download(b, back.data(), 64);
  for (const float v : back)
    if (v != 1.0f) return "the resubmitted fill ran before the compute recording it waits for";
  x.reset();
  if (!throws_gpu_error([&] { (void)x.done(); })) return "done() after reset did not throw";
  info = "done() before submission or after reset, after() an unsubmitted point or an unknown queue, a dispatch: "
         "gpu_error; a resubmission after a compute recording";
  return {};
}

}  // namespace

void queue_cases(suite& s) {
  for (const auto& [n, rounds] : {std::pair<uint64_t, uint32_t>{1027, 3}, {(uint64_t(6) << 20) + 5, 2}})
    s.run("transfer queue", "-", "sync points: transfer → dispatch → transfer → copy, n=" + std::to_string(n),
          [&, n, rounds](uint64_t seed, std::string& info) { return chain_case(s, seed, n, rounds, info); });
  s.run("transfer queue", "-", "errors", [&](uint64_t, std::string& info) { return error_case(s, info); });
}

}  // namespace cmfx::parity
