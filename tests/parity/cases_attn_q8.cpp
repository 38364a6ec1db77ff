// The int8 copy of the attention output written by the split attention's combine (kernels::attn_q8_out, docs/VULKAN.md
// "Quantisation steps folded into their producers"): o seen as vectors of vec_cols values (e.g. by wo_a group),
// packed for a format's integer-dot products. Against quantize_act on the float output the same dispatch wrote: the
// same bytes (every word of the vectors and their padding). The float output must be the bits of the call without
// the copy. A shape that does not split, or a head_dim that is not a multiple of 32, must say so (returns false) and
// leave the copy to the caller.
#include <cmath>
#include <cstring>
#include <memory>

#include "harness.hpp"

namespace cmfx::parity {

namespace {

struct q8_attn_cfg {
  uint32_t rows, heads, hd, keys, vec_cols;
  format f;
  uint32_t rope = 0;
  float masked = 0;
  int32_t empty_row = -1;
  bool want_split = true;
};

std::string attn_q8_case(suite& s, uint64_t seed, const q8_attn_cfg& a, std::string& info) {
  rng r(seed);
  const uint32_t H = a.heads, hd = a.hd, rows = a.rows, keys = a.keys, na = keys / 2 + 3;
  const std::vector<float> kv = r.normal(uint64_t(na) * hd), q = r.normal(uint64_t(rows) * H * hd, 2.0f),
                           sinks = r.normal(H, 1.5f), cs = r.normal(uint64_t(rows) * std::max(a.rope, 1u), 0.5f);
  std::vector<int32_t> idx(uint64_t(rows) * keys);
  for (uint32_t t = 0; t < rows; ++t)
    for (uint32_t k = 0; k < keys; ++k)
      idx[uint64_t(t) * keys + k] =
          int32_t(t) == a.empty_row || (a.masked > 0 && r.uniform(0, 1) < a.masked) ? -1 : int32_t(r.below(na));
  const gpu::buffer qb = upload(s.dev, q), kb = upload(s.dev, kv), ib = upload(s.dev, idx), sb = upload(s.dev, sinks),
                    cb = upload(s.dev, cs);
  const uint64_t total = uint64_t(rows) * H * hd, nv = total / a.vec_cols;
  const uint64_t qbytes = gpu::kernels::act_q8_bytes(a.vec_cols, uint32_t(nv));
  guarded og(s.dev, total * 4), og_plain(s.dev, total * 4), q8(s.dev, qbytes), ref(s.dev, qbytes);
  gpu::kernels::attn_shape sh{rows, H, hd, keys, na, 0, float(1.0 / std::sqrt(double(hd)))};
  sh.inv_rope_dim = a.rope;
  const gpu::kernels::attn_q8_out out{q8.payload(), a.f, a.vec_cols};
  const uint64_t xf = gpu::kernels::attn_scratch_floats(sh);
  std::unique_ptr<guarded> xg = xf ? std::make_unique<guarded>(s.dev, xf * 4) : nullptr,
                           xg2 = xf ? std::make_unique<guarded>(s.dev, xf * 4) : nullptr;
  const gpu::view cs_v = a.rope ? gpu::view(cb) : gpu::view();
  gpu::commands c = s.dev.begin();
  const bool wrote = s.kern.sparse_attention(c, sh, qb, kb, gpu::view(), ib, sb, og.payload(),
                                             xg ? xg->payload() : gpu::view(), cs_v, &out);
  const uint32_t dispatches = c.dispatch_count();
  s.kern.sparse_attention(c, sh, qb, kb, gpu::view(), ib, sb, og_plain.payload(), xg2 ? xg2->payload() : gpu::view(),
                          cs_v);
  c.barrier();
  s.kern.quantize_act(c, a.f, og.payload(), uint32_t(nv), a.vec_cols, ref.payload());
  s.submit(c);
  const bool split = dispatches == 2;
  if (a.want_split != split)
    return "shape " + std::string(split ? "splits" : "does not split") + ": the case no longer tests what it names";
  if (wrote != (split && hd % 32 == 0))
    return std::string("sparse_attention returned ") + (wrote ? "true" : "false") + " with " +
           std::to_string(dispatches) + " dispatches and head_dim " + std::to_string(hd);
  std::vector<uint32_t> got(qbytes / 4), want(qbytes / 4);
  std::vector<float> o(total), o_plain(total), scratch(xf);
  std::string why;
  if (!og.read(o.data(), why) || !og_plain.read(o_plain.data(), why) || !ref.read(want.data(), why) ||
      !q8.read(got.data(), why) || (xg && !xg->read(scratch.data(), why)) || (xg2 && !xg2->read(scratch.data(), why)))
    return why;
  if (std::memcmp(o.data(), o_plain.data(), total * 4)) return "the float output differs from the call without the copy";
  uint64_t live = 0;
  for (uint64_t i = 0; i < got.size(); ++i) {
    if (!wrote) {  // untouched: still the poison
      if (got[i] != guarded::nan_word) return "a call that returned false wrote the int8 copy (word " + std::to_string(i) + ")";
      continue;
    }
    if (got[i] != want[i])
      return "int8 copy word " + std::to_string(i) + " = " + std::to_string(got[i]) + ", quantize_act wrote " +
             std::to_string(want[i]);
    live += want[i] != guarded::nan_word;
  }
  info = wrote ? std::to_string(nv) + " vectors of " + std::to_string(a.vec_cols) + ": the bytes of quantize_act (" +
                     std::to_string(live) + " words), split; o as without the copy"
               : std::string(split ? "split, head_dim not a multiple of 32" : "1 pass") + ": the copy left to the caller";
  return {};
}

}  // namespace

void attn_q8_cases(suite& s) {
  using R = std::string;
  auto q8 = [&](const R& name, q8_attn_cfg a) {
    if (!s.kern.has_i8(a.f)) return;  // no int8 kernels on this device: the matvec_i8 rows say unsupported
    s.run("sparse_attn", "-", name, [=, &s](uint64_t seed, R& info) { return attn_q8_case(s, seed, a, info); });
  };
  q8("int8 copy q4tp: decode 1x64x512 keys 640 rope 64, by group of 4096", {1, 64, 512, 640, 4096, format::q4tp, 64});
  q8("int8 copy q2tp: 1x64x512 keys 130 masked 20%, by group of 4096", {1, 64, 512, 130, 4096, format::q2tp, 0, 0.2f});
  q8("int8 copy mxfp4: 3x5x96 keys 130 rope 32, all-masked row 1, a vector per row",
     {3, 5, 96, 130, 480, format::mxfp4, 32, 0, 1});
  q8("int8 copy q4tp: 1x6x64 keys 1100, vectors of 32", {1, 6, 64, 1100, 32, format::q4tp});
  q8("int8 copy q4tp: one pass 1x64x512 keys 7 (the caller quantises)",
     {1, 64, 512, 7, 4096, format::q4tp, 64, 0, -1, false});
  q8("int8 copy q4tp: split 1x4x48 keys 640, head_dim 48 (the caller quantises)", {1, 4, 48, 640, 192, format::q4tp});
}

}  // namespace cmfx::parity
