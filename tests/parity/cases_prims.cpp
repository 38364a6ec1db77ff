// Cases of the small primitives: add and scale (bit-exact vs the CPU's float add / multiply), matmul_rows of every
// format (bit-identical to the same rows of the full matmul, and vs ref::gemm in float64), and the recorded
// transfers update / copy / fill ordered with dispatches (every byte checked, guards intact), with their error paths.
#include <array>
#include <bit>
#include <cstring>
#include <random>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cmfx/core/error.hpp"
#include "cmfx/ref/gemm_ref.hpp"
#include "harness.hpp"

namespace cmfx::parity {

namespace {

/// Index of the first element whose bits differ, or n.
size_t first_diff(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return i;
  return n;
}

std::string diff_msg(const char* what, size_t i, float got, float want) {
  char b[160];
  std::snprintf(b, sizeof b, "%s: element %zu is %.9g (0x%08x), expected %.9g (0x%08x)", what, i, double(got),
                std::bit_cast<uint32_t>(got), double(want), std::bit_cast<uint32_t>(want));
  return b;
}

/// A sub-range of a guarded payload: `bytes` at byte `off` inside it.
gpu::view sub(const gpu::view& payload, uint64_t off, uint64_t bytes) { return gpu::view(*payload.buf, payload.offset + off, bytes); }

/// y[i] += x[i] (or y[i] *= a) over the first n of `cap` floats of a guarded y holding random values: the first n
/// must equal the CPU's float result bit for bit, the rest stay as uploaded.
std::string add_scale_case(suite& s, uint64_t seed, uint64_t n, bool is_add, std::string& info) {
  rng r(seed);
  const uint64_t cap = n + 5;  // 5 floats past n that the kernel must not touch
  const std::vector<float> x = r.normal(n), y0 = r.normal(cap);
  const float a = r.uniform(-3.0f, 3.0f);
  const gpu::buffer xb = upload(s.dev, x);
  guarded y(s.dev, cap * 4);
  s.dev.upload(y.payload(), y0);
  gpu::commands c = s.dev.begin();
  if (is_add)
    s.kern.add(c, xb, y.payload(), n);
  else
    s.kern.scale(c, y.payload(), n, a);
  s.submit(c);
  std::vector<float> got(cap), want(y0);
  std::string why;
  if (!y.read(got.data(), why)) return why;
  for (uint64_t i = 0; i < n; ++i) want[i] = is_add ? y0[i] + x[i] : y0[i] * a;
  info = is_add ? "bit-exact vs float x+y" : "bit-exact vs float y*a";
  const size_t d = first_diff(got.data(), want.data(), cap);
  if (d != cap) return diff_msg(d < n ? "result" : "element past n changed", d, got[d], want[d]);
  return {};
}

template <class F>
struct host_matrix {
  encoded_matrix e;
  matrix_view v;
  host_matrix(rng& r, uint64_t rows, uint64_t cols) {
    const std::vector<float> w = r.normal(rows * cols, 0.05f);
    e = F::encode(w.data(), rows, cols);
    v = matrix_view{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                    e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
  }
};

/// matmul_rows(w, r0, r1) in the same recording as the full matmul: rows must be bit-identical to the full
/// output's rows r0..r1, and within the matvec bounds of ref::gemm (NMSE over >= 64 outputs; per output always:
/// |gpu − ref| <= kMaxAbsRel·Σ|w·x|).
template <class F>
std::string rows_case(suite& s, uint64_t seed, uint64_t R, uint64_t C, uint64_t r0, uint64_t r1, std::string& info) {
  rng r(seed);
  const host_matrix<F> m(r, R, C);
  const std::vector<float> x = r.normal(C);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, x);
  const uint64_t n = r1 - r0;
  guarded full(s.dev, R * 4), part(s.dev, n * 4);
  gpu::commands c = s.dev.begin();
  s.kern.matmul(c, gm, xb, 1, full.payload());
  s.kern.matmul_rows(c, gm, r0, r1, xb, part.payload());
  s.submit(c);
  std::vector<float> gf(R), gp(n);
  std::string why;
  if (!full.read(gf.data(), why) || !part.read(gp.data(), why)) return why;
  const size_t d = first_diff(gp.data(), gf.data() + r0, n);
  if (d != n) return diff_msg("not bit-identical to the full matmul", d, gp[d], gf[r0 + d]);
  const std::vector<double> ref = ref::gemm(F::id, m.v, x.data(), 1);
  std::vector<float> row(C);
  for (uint64_t i = 0; i < n; ++i) {
    F::decode_row(m.v, r0 + i, row.data());
    double wx = 0;
    for (uint64_t k = 0; k < C; ++k) wx += std::fabs(double(row[k]) * x[k]);
    if (!(std::fabs(gp[i] - ref[r0 + i]) <= kMaxAbsRel * wx))
      return "row " + std::to_string(r0 + i) + ": " + std::to_string(gp[i]) + " vs reference " +
             std::to_string(ref[r0 + i]) + " (bound " + std::to_string(kMaxAbsRel) + " x sum|w*x|)";
  }
  if (n < 64) {
    info = "bit-identical to matmul; per-output bound (" + std::to_string(n) + " outputs)";
    return {};
  }
  const std::string v = verdict(compare(gp.data(), ref.data() + r0, n), kNmse, info);
  info += "; bit-identical to matmul";
  return v;
}

/// Batched matmul_rows over n tokens read from rows of x_stride floats and written into rows of y_stride floats (a
/// prefill chunk's grouped wo_a): bit-identical to the same rows of the full batched matmul in the same recording,
/// the padding between rows untouched, and every output within the per-output bound of ref::gemm.
template <class F>
std::string rows_batch_case(suite& s, uint64_t seed, uint64_t R, uint64_t C, uint64_t r0, uint64_t r1, uint32_t n,
                            std::string& info) {
  rng r(seed);
  const host_matrix<F> m(r, R, C);
  const uint64_t XS = C + 12, RN = r1 - r0, YS = RN + 3;
  const std::vector<float> x = r.normal(uint64_t(n) * C);
  std::vector<float> xs(uint64_t(n) * XS, 1e30f);
  for (uint32_t t = 0; t < n; ++t) std::copy(x.begin() + t * C, x.begin() + (t + 1) * C, xs.begin() + t * XS);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, x), xsb = upload(s.dev, xs);
  const std::vector<float> y0 = r.normal(uint64_t(n) * YS);
  guarded full(s.dev, uint64_t(n) * R * 4), part(s.dev, uint64_t(n) * YS * 4);
  s.dev.upload(part.payload(), y0);
  gpu::commands c = s.dev.begin();
  s.kern.matmul(c, gm, xb, n, full.payload());
  s.kern.matmul_rows(c, gm, r0, r1, xsb, n, XS, part.payload(), YS);
  s.submit(c);
  std::vector<float> gf(uint64_t(n) * R), gp(uint64_t(n) * YS);
  std::string why;
  if (!full.read(gf.data(), why) || !part.read(gp.data(), why)) return why;
  const std::vector<double> ref = ref::gemm(F::id, m.v, x.data(), n);
  std::vector<float> row(C);
  for (uint32_t t = 0; t < n; ++t) {
    const size_t d = first_diff(gp.data() + t * YS, gf.data() + t * R + r0, RN);
    if (d != RN) return "token " + std::to_string(t) + ": " + diff_msg("not bit-identical to the full matmul", d, gp[t * YS + d], gf[t * R + r0 + d]);
    for (uint64_t p = RN; p < YS; ++p)
      if (std::bit_cast<uint32_t>(gp[t * YS + p]) != std::bit_cast<uint32_t>(y0[t * YS + p]))
        return "token " + std::to_string(t) + ": padding float " + std::to_string(p) + " of the y row was written";
    for (uint64_t i = 0; i < RN; ++i) {
      F::decode_row(m.v, r0 + i, row.data());
      double wx = 0;
      for (uint64_t k = 0; k < C; ++k) wx += std::fabs(double(row[k]) * x[t * C + k]);
      const double want = ref[uint64_t(t) * R + r0 + i];
      if (!(std::fabs(gp[t * YS + i] - want) <= kMaxAbsRel * wx))
        return "token " + std::to_string(t) + " row " + std::to_string(r0 + i) + ": " + std::to_string(gp[t * YS + i]) +
               " vs reference " + std::to_string(want);
    }
  }
  info = std::to_string(n) + " tokens, strides " + std::to_string(XS) + "/" + std::to_string(YS) +
         ": bit-identical to the batched matmul, padding intact, per-output bound vs float64";
  return {};
}

/// Calls fn(); "" when it threw usage_error, else a failure naming `what`.
template <class Fn>
std::string expect_usage_error(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const usage_error&) {
    return {};
  }
  return std::string(what) + ": no usage_error";
}

template <class F>
std::string rows_errors(suite& s, uint64_t seed, std::string& info) {
  rng r(seed);
  constexpr uint64_t R = 64, C = 256;
  const host_matrix<F> m(r, R, C);
  const gpu::gpu_matrix gm = gpu::upload_matrix(s.dev, F::id, m.v);
  const gpu::buffer xb = upload(s.dev, r.normal(C)), yb = s.dev.alloc(R * 4);
  gpu::commands c = s.dev.begin();
  std::string why;
  const auto chk = [&](const char* what, uint64_t r0, uint64_t r1, gpu::view y) {
    if (why.empty()) why = expect_usage_error(what, [&] { s.kern.matmul_rows(c, gm, r0, r1, xb, y); });
  };
  chk("r0 == r1", 32, 32, yb);
  chk("r0 > r1", 40, 32, yb);
  chk("r1 > rows", 0, R + 1, yb);
  chk("r0 >= rows", R, R + 1, yb);
  chk("y too small", 0, R, gpu::view(yb, 0, R * 4 - 4));
  info = "5 bad calls -> usage_error";
  return why;
}

/// update → add (reads the update) → copy to another buffer → scale of the copy → fill of part of it, on views at
/// inner offsets of guarded buffers; every byte of both payloads is checked.
std::string transfer_case(suite& s, uint64_t seed, uint64_t n, std::string& info) {
  rng r(seed);
  const uint64_t bytes = n * 4, oa = 8, ob = 12, pad = 16;  // inner offsets and untouched tails (poison)
  const std::vector<float> u = r.normal(n), x = r.normal(n);
  const float a = r.uniform(0.5f, 2.0f);
  const uint64_t f0 = r.below(n), f1 = f0 + 1 + r.below(n - f0);  // fill floats [f0, f1)
  const uint32_t word = 0x3F800000u ^ uint32_t(r.below(1u << 20));
  const gpu::buffer xb = upload(s.dev, x);
  guarded A(s.dev, oa + bytes + pad), B(s.dev, ob + bytes + pad);
  const gpu::view va = sub(A.payload(), oa, bytes), vb = sub(B.payload(), ob, bytes);
  gpu::commands c = s.dev.begin();
  for (uint64_t o = 0; o < bytes; o += gpu::commands::update_max) {  // distinct ranges: no order needed among them
    const uint64_t k = std::min(gpu::commands::update_max, bytes - o);
    c.update(sub(A.payload(), oa + o, k), reinterpret_cast<const uint8_t*>(u.data()) + o, k);
  }
  s.kern.add(c, xb, va, n);
  c.copy(va, vb, bytes);
  s.kern.scale(c, vb, n, a);
  c.fill(sub(B.payload(), ob + f0 * 4, (f1 - f0) * 4), (f1 - f0) * 4, word);
  // host-written memory in, host-read memory out (alloc_upload, alloc_readback): the host reads B back through a
  // mapping, its neighbours poisoned
  gpu::buffer up = s.dev.alloc_upload(bytes), rb = s.dev.alloc_readback(bytes + 8);
  std::memcpy(s.dev.mapped(up), x.data(), bytes);
  std::memset(s.dev.mapped(rb), 0xA5, bytes + 8);
  gpu::buffer xin = s.dev.alloc(bytes);
  c.copy(up, xin, bytes);
  c.copy(sub(B.payload(), ob, bytes), gpu::view(rb, 4, bytes), bytes);
  // run asynchronously and seen finished by polling (device::ready, as the expert cache's spinning waits), then
  // wait(): every result below must be there
  if (!s.dev.ready(c)) return "ready(): false for a recording not submitted";
  s.dev.submit_async(c);
  for (uint64_t polls = 0; !s.dev.ready(c); ++polls)
    if (polls > (1ull << 34)) return "ready(): never true";
  s.dev.wait(c);
  if (!s.dev.ready(c)) return "ready(): false after wait()";
  std::vector<float> ga((oa + bytes + pad) / 4), gb((ob + bytes + pad) / 4);
  std::string why;
  if (!A.read(ga.data(), why) || !B.read(gb.data(), why)) return why;
  std::vector<float> wa(ga.size(), std::bit_cast<float>(guarded::nan_word)), wb(gb.size(), wa[0]);
  for (uint64_t i = 0; i < n; ++i) {
    wa[oa / 4 + i] = u[i] + x[i];
    wb[ob / 4 + i] = i >= f0 && i < f1 ? std::bit_cast<float>(word) : (u[i] + x[i]) * a;
  }
  size_t d = first_diff(ga.data(), wa.data(), ga.size());
  if (d != ga.size()) return diff_msg("buffer A (update + add)", d, ga[d], wa[d]);
  d = first_diff(gb.data(), wb.data(), gb.size());
  if (d != gb.size()) return diff_msg("buffer B (copy, scale, fill)", d, gb[d], wb[d]);
  {
    const uint8_t* m = s.dev.mapped(rb);
    std::vector<float> got(n);
    std::memcpy(got.data(), m + 4, bytes);
    d = first_diff(got.data(), wb.data() + ob / 4, n);
    if (d != n) return diff_msg("alloc_readback copy of B, read through its mapping", d, got[d], wb[ob / 4 + d]);
    for (const uint64_t o : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(3), bytes + 4, bytes + 7})
      if (m[o] != 0xA5) return "alloc_readback: byte " + std::to_string(o) + " outside the copy was written";
    std::vector<float> xr(n);
    s.dev.download(xin, xr.data(), bytes);
    if (std::memcmp(xr.data(), x.data(), bytes)) return "alloc_upload: the device copy of host-written memory differs";
  }
  info = std::to_string((bytes + gpu::commands::update_max - 1) / gpu::commands::update_max) +
         " update(s), fill [" + std::to_string(f0) + ", " + std::to_string(f1) + "): every byte exact";
  return {};
}

/// Bad transfer sizes and offsets throw usage_error before recording; the recording still works afterwards.
std::string transfer_errors(suite& s, uint64_t seed, std::string& info) {
  rng r(seed);
  const std::vector<float> h = r.normal(gpu::commands::update_max / 4 + 4);
  guarded g(s.dev, gpu::commands::update_max + 64);
  const gpu::buffer other = s.dev.alloc(256);
  const gpu::view p = g.payload();
  gpu::commands c = s.dev.begin();
  std::string why;
  const auto chk = [&](const char* what, auto&& fn) {
    if (why.empty()) why = expect_usage_error(what, fn);
  };
  chk("update 6 bytes", [&] { c.update(p, h.data(), 6); });
  chk("update 65540 bytes", [&] { c.update(p, h.data(), gpu::commands::update_max + 4); });
  chk("update at offset 2", [&] { c.update(sub(p, 2, 8), h.data(), 8); });
  chk("update past the view", [&] { c.update(sub(p, 0, 8), h.data(), 12); });
  chk("fill 6 bytes", [&] { c.fill(p, 6, 1u); });
  chk("fill at offset 2", [&] { c.fill(sub(p, 2, 8), 8, 1u); });
  chk("fill past the view", [&] { c.fill(sub(p, 0, 8), 12, 1u); });
  chk("copy past the source", [&] { c.copy(gpu::view(other, 0, 256), p, 260); });
  chk("copy past the destination", [&] { c.copy(p, gpu::view(other, 0, 256), 260); });
  chk("copy without a view", [&] { c.copy(gpu::view{}, p, 4); });
  if (!why.empty()) return why;
  c.update(p, h.data(), gpu::commands::update_max);  // the same recording, valid calls
  s.submit(c);
  std::vector<float> got(g.payload().bytes / 4);
  if (!g.read(got.data(), why)) return why;
  const size_t d = first_diff(got.data(), h.data(), gpu::commands::update_max / 4);
  if (d != gpu::commands::update_max / 4) return diff_msg("update after the rejected calls", d, got[d], h[d]);
  for (size_t i = gpu::commands::update_max / 4; i < got.size(); ++i)
    if (std::bit_cast<uint32_t>(got[i]) != guarded::nan_word) return diff_msg("byte past the update", i, got[i], 0);
  info = "10 bad calls -> usage_error; recording usable after";
  return {};
}

/// device::upload / download of `bytes` at an odd 4-byte offset (on a discrete device, or with --force-staging:
/// the upload alternates the two 32 MiB staging halves, the download goes through the 64 MiB staging buffer):
/// every byte back, the bytes around the range untouched.
std::string roundtrip(suite& s, uint64_t seed, uint64_t bytes, std::string& info) {
  std::mt19937_64 g(seed);
  std::vector<uint32_t> h(bytes / 4);
  for (uint32_t& w : h) w = uint32_t(g());
  const uint64_t off = 12;
  const gpu::buffer b = s.dev.alloc(bytes + 2 * off);
  const std::vector<uint32_t> marks(off / 4, 0xA5A5A5A5u);
  s.dev.upload(gpu::view(b, 0, off), marks.data(), off);
  s.dev.upload(gpu::view(b, bytes + off, off), marks.data(), off);
  s.dev.upload(gpu::view(b, off, bytes), h.data(), bytes);
  std::vector<uint32_t> back(bytes / 4 + 2 * off / 4);
  s.dev.download(b, back.data(), bytes + 2 * off);
  for (uint64_t i = 0; i < off / 4; ++i)
    if (back[i] != marks[0] || back[back.size() - 1 - i] != marks[0]) return "a byte outside the uploaded range changed";
  for (uint64_t i = 0; i < h.size(); ++i)
    if (back[off / 4 + i] != h[i]) return "word " + std::to_string(i) + " differs after the round trip";
  info = std::to_string(bytes >> 20) + " MiB up and back: every byte";
  return {};
}

/// Uploads from host memory the device may import (VK_EXT_external_memory_host; the staged path of a discrete GPU,
/// or --force-staging): an unaligned heap range and an unaligned range of a read-only file mapping, each past
/// device_impl::import_min, land byte for byte between untouched marks. Where the device imports and uploads are
/// staged, the heap range must have been copied from its imported pages (memory().imported_upload_bytes); a
/// mapping the driver will not pin may be staged instead (reported).
std::string host_import_case(suite& s, uint64_t seed, std::string& info) {
  std::mt19937_64 g(seed);
  const uint64_t heap_bytes = (3ull << 20) + 5, file_bytes = (2ull << 20) + 301, off = 12;
  auto fill = [&](uint8_t* p, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) p[i] = uint8_t(g());
  };
  std::vector<uint8_t> heap(heap_bytes + 100);
  fill(heap.data(), heap.size());
  char path[] = "/tmp/cmfx-import-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "mkstemp failed";
  std::vector<uint8_t> file(file_bytes + 1000);
  fill(file.data(), file.size());
  const bool wrote = ::write(fd, file.data(), file.size()) == ssize_t(file.size());
  void* map = wrote ? mmap(nullptr, file.size(), PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  ::close(fd);
  ::unlink(path);
  if (map == MAP_FAILED) return "could not write and map the temporary file";
  struct unmap {
    void* p;
    size_t n;
    ~unmap() { munmap(p, n); }
  } um{map, file.size()};
  const uint64_t before = s.dev.memory().imported_upload_bytes;
  auto check = [&](const uint8_t* src, uint64_t n, const char* what, uint64_t& imported) -> std::string {
    const uint64_t b0 = s.dev.memory().imported_upload_bytes;
    const gpu::buffer b = s.dev.alloc(n + 2 * off);
    const std::vector<uint8_t> marks(off, 0xA5);
    s.dev.upload(gpu::view(b, 0, off), marks.data(), off);
    s.dev.upload(gpu::view(b, n + off, off), marks.data(), off);
    s.dev.upload(gpu::view(b, off, n), src, n);
    imported = s.dev.memory().imported_upload_bytes - b0;
    std::vector<uint8_t> back(n + 2 * off);
    s.dev.download(b, back.data(), back.size());
    for (uint64_t i = 0; i < off; ++i)
      if (back[i] != 0xA5 || back[n + off + i] != 0xA5) return std::string(what) + ": a byte outside the range changed";
    if (std::memcmp(back.data() + off, src, n) != 0) return std::string(what) + ": bytes differ after the upload";
    return {};
  };
  uint64_t from_heap = 0, from_file = 0;
  if (auto why = check(heap.data() + 37, heap_bytes, "heap range", from_heap); !why.empty()) return why;
  if (auto why = check(static_cast<const uint8_t*>(map) + 1000, file_bytes, "file mapping", from_file); !why.empty())
    return why;
  const gpu::device_info& di = s.dev.info();
  const bool staged = !di.host_visible;
  if (di.host_import && staged && from_heap != heap_bytes)
    return "the device imports host memory, but the heap range was staged (" + std::to_string(from_heap) + " of " +
           std::to_string(heap_bytes) + " bytes imported)";
  if (!(di.host_import && staged) && s.dev.memory().imported_upload_bytes != before)
    return "bytes imported where no import should happen";
  info = !staged          ? "mapped memory: uploads are plain copies (no staging, no import)"
         : !di.host_import ? "staged; no host import (device_options::allow_host_import off, or no extension)"
                           : "staged with host import: heap range imported, file mapping " +
                                 std::string(from_file == file_bytes ? "imported" : "staged (not imported by the driver)");
  return {};
}

/// Long recordings and commands::reset: `count` dependent scale dispatches (past the first descriptor pools, which
/// grow 64, 128, 256, 512 sets) give x · a^count; after reset the same commands object records count + 37 more and
/// runs them; every value exact (powers of two).
std::string long_recording(suite& s, uint64_t seed, uint32_t count, std::string& info) {
  rng r(seed);
  const uint64_t n = 300;
  const std::vector<float> x = r.normal(n);
  guarded g(s.dev, n * 4);
  gpu::commands c = s.dev.begin();
  std::string why;
  for (const uint32_t k : {count, count + 37}) {
    c.update(g.payload(), x.data(), n * 4);
    for (uint32_t i = 0; i < k; ++i) s.kern.scale(c, g.payload(), n, i % 2 ? 2.0f : 0.5f);
    s.submit(c);
    std::vector<float> got(n);
    if (!g.read(got.data(), why)) return why;
    const float f = k % 2 ? 0.5f : 1.0f;  // pairs of ·0.5 ·2 cancel exactly
    for (uint64_t i = 0; i < n; ++i)
      if (got[i] != x[i] * f) return diff_msg(k == count ? "first recording" : "recording after reset", i, got[i], x[i] * f);
    c.reset();
  }
  info = std::to_string(count) + " then " + std::to_string(count + 37) + " dependent dispatches (reset between): exact";
  return {};
}

}  // namespace

/// add_tiled: y[t] += x[(first + t) % period] bit-exactly (float adds), the floats past rows·n untouched.
std::string add_tiled_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, uint32_t period, uint32_t first,
                           std::string& info) {
  rng r(seed);
  const std::vector<float> x = r.normal(uint64_t(period) * n), y0 = r.normal(uint64_t(rows) * n + 7);
  const gpu::buffer xb = upload(s.dev, x);
  guarded y(s.dev, y0.size() * 4);
  s.dev.upload(y.payload(), y0);
  gpu::commands c = s.dev.begin();
  s.kern.add_tiled(c, xb, period, first, y.payload(), rows, n);
  s.submit(c);
  std::vector<float> got(y0.size()), want(y0);
  std::string why;
  if (!y.read(got.data(), why)) return why;
  for (uint64_t t = 0; t < rows; ++t)
    for (uint64_t k = 0; k < n; ++k) want[t * n + k] = x[((first + t) % period) * n + k] + y0[t * n + k];
  const size_t d = first_diff(got.data(), want.data(), want.size());
  if (d != want.size()) return diff_msg(d < uint64_t(rows) * n ? "result" : "element past the rows changed", d, got[d], want[d]);
  info = "bit-exact";
  return {};
}

/// pick_keys: every slot of every row exact (kept picks, −1 for picks at or past the row's count and for
/// 0xFFFFFFFF), the other slots of each key-list row untouched.
std::string pick_keys_case(suite& s, uint64_t seed, uint32_t rows, uint32_t k, uint32_t stride, uint32_t offset,
                           std::string& info) {
  rng r(seed);
  const uint32_t n = 3 * k;
  std::vector<uint32_t> picks(uint64_t(rows) * k), counts(rows), idx0(uint64_t(rows) * stride);
  for (auto& p : picks) p = r.below(8) == 0 ? 0xFFFFFFFFu : uint32_t(r.below(n));
  for (auto& c : counts) c = uint32_t(r.below(n + 1));
  for (auto& v : idx0) v = uint32_t(r.below(1u << 30));
  const gpu::buffer pb = upload(s.dev, picks), cb = upload(s.dev, counts);
  guarded ib(s.dev, idx0.size() * 4);
  s.dev.upload(ib.payload(), idx0);
  gpu::commands c = s.dev.begin();
  s.kern.pick_keys(c, pb, cb, rows, k, ib.payload(), stride, offset);
  s.submit(c);
  std::vector<uint32_t> got(idx0.size()), want(idx0);
  std::string why;
  if (!ib.read(got.data(), why)) return why;
  uint64_t dropped = 0;
  for (uint64_t t = 0; t < rows; ++t)
    for (uint64_t j = 0; j < k; ++j) {
      const uint32_t p = picks[t * k + j];
      want[t * stride + offset + j] = p < counts[t] ? p : 0xFFFFFFFFu;
      dropped += p >= counts[t];
    }
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return "slot " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
  info = "exact (" + std::to_string(dropped) + " picks dropped)";
  return {};
}

void prim_cases(suite& s) {
  for (const auto& [rows, n, period, first] : {std::array<uint32_t, 4>{5, 96, 4, 2}, {37, 256, 128, 127},
                                               {130, 64, 4, 0}, {1, 1000, 3, 7}})
    s.run("add_tiled", "-", std::to_string(rows) + "x" + std::to_string(n) + " period " + std::to_string(period) +
                                " first " + std::to_string(first),
          [&](uint64_t seed, std::string& info) { return add_tiled_case(s, seed, rows, n, period, first, info); });
  for (const auto& [rows, k, stride, offset] : {std::array<uint32_t, 4>{1, 8, 24, 16}, {37, 64, 200, 128},
                                                {130, 5, 5, 0}})
    s.run("pick_keys", "-", std::to_string(rows) + " rows k " + std::to_string(k) + " stride " + std::to_string(stride),
          [&](uint64_t seed, std::string& info) { return pick_keys_case(s, seed, rows, k, stride, offset, info); });
  for (uint64_t n : {1, 7, 1000, 65537}) {
    s.run("add", "-", "n=" + std::to_string(n),
          [&](uint64_t seed, std::string& info) { return add_scale_case(s, seed, n, true, info); });
    s.run("scale", "-", "n=" + std::to_string(n),
          [&](uint64_t seed, std::string& info) { return add_scale_case(s, seed, n, false, info); });
  }
  // matmul_rows: every format (the coverage table counts a per-format op without a case as missing). r0 > 0 a
  // multiple of the format's block_rows (FP8 tiles), ragged row counts, one row, and row slicing from r0.
  for_each_type(all_formats{}, [&]<class F>() {
    const std::string fn(F::name);
    const uint64_t br = F::block_rows, a0 = br > 1 ? br : 37;
    struct rr {
      uint64_t R, C, r0, r1;
    };
    const rr cases[] = {{300, 512, a0, 299}, {300, 512, br > 1 ? 2 * br : 299, br > 1 ? 2 * br + 1 : 300},
                        {130, 256, 0, 130}, {257, 1024, br > 1 ? br : 1, 257}};
    for (const rr& k : cases) {
      if (!F::shape_ok(k.R, k.C)) continue;
      s.run("matmul_rows", fn,
            std::to_string(k.R) + "x" + std::to_string(k.C) + " rows [" + std::to_string(k.r0) + "," +
                std::to_string(k.r1) + ")",
            [&](uint64_t seed, std::string& info) { return rows_case<F>(s, seed, k.R, k.C, k.r0, k.r1, info); });
    }
    s.run("matmul_rows", fn, "300x1024 rows [" + std::to_string(a0) + ",300) sliced (64 KiB bindings)",
          [&](uint64_t seed, std::string& info) {
            s.kern.set_binding_limit(64 << 10);
            const std::string why = rows_case<F>(s, seed, 300, 1024, a0, 300, info);
            s.kern.set_binding_limit(0);
            return why;
          });
    s.run("matmul_rows", fn, "bad ranges", [&](uint64_t seed, std::string& info) { return rows_errors<F>(s, seed, info); });
    for (const uint32_t n : {2u, 19u})
      if (F::shape_ok(300, 512))
        s.run("matmul_rows", fn, "300x512 rows [" + std::to_string(a0) + ",299) x " + std::to_string(n) + " strided tokens",
              [&](uint64_t seed, std::string& info) { return rows_batch_case<F>(s, seed, 300, 512, a0, 299, n, info); });
  });
  for (uint64_t n : {1, 7, 1000, 16384, 65537})  // 16384 floats = one update of exactly update_max bytes
    s.run("transfer", "-", "n=" + std::to_string(n),
          [&](uint64_t seed, std::string& info) { return transfer_case(s, seed, n, info); });
  s.run("transfer", "-", "bad sizes", [&](uint64_t seed, std::string& info) { return transfer_errors(s, seed, info); });
  s.run("transfer", "-", "upload/download 80 MiB round trip", [&](uint64_t seed, std::string& info) {
    return roundtrip(s, seed, 80ull << 20, info);
  });
  s.run("transfer", "-", "uploads from importable host memory (heap, file mapping)",
        [&](uint64_t seed, std::string& info) { return host_import_case(s, seed, info); });
  for (const uint32_t count : {63u, 700u})
    s.run("recording", "-", std::to_string(count) + " dispatches, reset, re-record",
          [&](uint64_t seed, std::string& info) { return long_recording(s, seed, count, info); });
}

}  // namespace cmfx::parity
