// Host side of the layer primitives on the GPU that are not matrix products: RMSNorm (+ int8 copy, + rope), rope,
// softmax with sink, top-k, SwiGLU with the clamp, add / scale, the streaming read of the benchmarks' roofline.
#include "kernels_impl.hpp"

namespace cmfx::gpu {

namespace {
/// The checks and bindings of rmsnorm.comp's x, weight (or the dummy) and y, and its first push constants.
struct rms_io {
  bound x, w, y;
  struct pc_head {
    uint32_t rows, dim, xoff, woff, yoff, has_w;
    float eps;
    uint32_t pad;
  } pc;
};
rms_io rms_bind(const device_info& info, binding dummy, view x, view weight, view y, uint32_t rows, uint32_t dim,
                float eps, const char* op) {
  const uint64_t bytes = uint64_t(rows) * dim * 4;
  detail::need_view(x, bytes, op, "x");
  detail::need_view(y, bytes, op, "y");
  if (weight) detail::need_view(weight, uint64_t(dim) * 4, op, "weight");
  rms_io r{bind_range(info, x, 0, bytes), weight ? bind_range(info, weight, 0, uint64_t(dim) * 4) : bound{dummy, 0},
           bind_range(info, y, 0, bytes), {}};
  r.pc = {rows, dim, r.x.residual / 4, r.w.residual / 4, r.y.residual / 4, weight ? 1u : 0u, eps, 0};
  return r;
}
}  // namespace

void kernels::rmsnorm(commands& c, view x, view weight, view y, uint32_t rows, uint32_t dim, float eps) {
  if (rows == 0 || dim == 0) return;
  const rms_io io = rms_bind(p_->info, p_->dummy(), x, weight, y, rows, dim, eps, "rmsnorm");
  const rms_io::pc_head pc = io.pc;
  const binding b[3] = {io.x.b, io.w.b, io.y.b};
  uint32_t gx, gy;
  p_->grid(rows, gx, gy);
  detail::dispatch(c.impl(), p_->pipe("rmsnorm.comp", "", impl::wg_rows, 3, sizeof pc), b, &pc, sizeof pc, gx, gy);
}

void kernels::rmsnorm_q8(commands& c, view x, view weight, view y, uint32_t rows, uint32_t dim, float eps, format f,
                         view xq) {
  if (!p_->i8_kernel(f)) throw usage_error("rmsnorm_q8: no int8-activation kernel for this format or device");
  if (dim == 0 || dim % 32) throw usage_error("rmsnorm_q8: dim must be a positive multiple of 32");
  if (rows == 0) return;
  const uint64_t qbytes = act_q8_bytes(dim, rows);
  detail::need_view(xq, qbytes, "rmsnorm_q8", "xq");
  const rms_io io = rms_bind(p_->info, p_->dummy(), x, weight, y, rows, dim, eps, "rmsnorm_q8");
  const bound qb = bind_range(p_->info, xq, 0, qbytes);
  struct {
    rms_io::pc_head h;
    uint32_t qoff, pad2, pad3, pad4;
  } pc{io.pc, qb.residual / 4, 0, 0, 0};
  const binding b[5] = {io.x.b, io.w.b, io.y.b, p_->dummy(), qb.b};
  const scale_encoding enc = (f == format::mxfp4) ? scale_encoding::e8m0 : scale_encoding::none;
  const std::string defs = format_defines(f, enc) + "#define RMS_Q8 1\n" + detail::op_env_of(*p_).act_wide_defines();
  uint32_t gx, gy;
  p_->grid(rows, gx, gy);
  detail::dispatch(c.impl(), p_->pipe("rmsnorm.comp", defs, impl::wg_rows, 5, sizeof pc), b, &pc, sizeof pc, gx, gy);
}

void kernels::rmsnorm_rope(commands& c, view x, view weight, view y, uint32_t rows, uint32_t dim, float eps, view cs,
                           uint32_t heads, uint32_t rope_dim) {
  if (rope_dim == 0 || rope_dim % 2 || rope_dim > dim) throw usage_error("rmsnorm_rope: rope_dim must be even, <= dim");
  if (heads == 0 || rows % heads) throw usage_error("rmsnorm_rope: rows must be a multiple of heads");
  if (rows == 0) return;
  const uint64_t cbytes = uint64_t(rows / heads) * rope_dim * 4;
  detail::need_view(cs, cbytes, "rmsnorm_rope", "cs");
  const rms_io io = rms_bind(p_->info, p_->dummy(), x, weight, y, rows, dim, eps, "rmsnorm_rope");
  const bound cb = bind_range(p_->info, cs, 0, cbytes);
  struct {
    rms_io::pc_head h;
    uint32_t heads, rope_dim, csoff, pad1;
  } pc{io.pc, heads, rope_dim, cb.residual / 4, 0};
  const binding b[4] = {io.x.b, io.w.b, io.y.b, cb.b};
  uint32_t gx, gy;
  p_->grid(rows, gx, gy);
  detail::dispatch(c.impl(), p_->pipe("rmsnorm.comp", "#define RMS_ROPE 1\n", impl::wg_rows, 4, sizeof pc), b, &pc,
                   sizeof pc, gx, gy);
}

void kernels::rope(commands& c, view x, view cs, uint32_t rows, uint32_t heads, uint32_t head_dim, uint32_t rope_dim,
                   bool inverse) {
  if (rope_dim == 0 || rope_dim % 2 || rope_dim > head_dim) throw usage_error("rope: rope_dim must be even, <= head_dim");
  if (rows == 0 || heads == 0) return;
  const uint64_t xbytes = uint64_t(rows) * heads * head_dim * 4, cbytes = uint64_t(rows) * rope_dim * 4;
  detail::need_view(x, xbytes, "rope", "x");
  detail::need_view(cs, cbytes, "rope", "cs");
  const bound xb = bind_range(p_->info, x, 0, xbytes), cb = bind_range(p_->info, cs, 0, cbytes);
  const uint32_t pc[8] = {rows, heads, head_dim, rope_dim, xb.residual / 4, cb.residual / 4, inverse ? 1u : 0u, 0};
  const binding b[2] = {xb.b, cb.b};
  uint32_t gx, gy;
  p_->grid(ceil_div(uint64_t(rows) * heads * (rope_dim / 2), impl::wg_rows), gx, gy);
  detail::dispatch(c.impl(), p_->pipe("rope.comp", "", impl::wg_rows, 2, sizeof pc), b, pc, sizeof pc, gx, gy);
}

void kernels::softmax_sink(commands& c, view logits, view sinks, uint32_t sink_count, view p, uint32_t rows,
                           uint32_t n) {
  if (rows == 0 || n == 0) return;
  const uint64_t bytes = uint64_t(rows) * n * 4;
  detail::need_view(logits, bytes, "softmax_sink", "logits");
  detail::need_view(p, bytes, "softmax_sink", "p");
  if (!sinks) sink_count = 0;
  if (sink_count) detail::need_view(sinks, uint64_t(sink_count) * 4, "softmax_sink", "sinks");
  const bound lb = bind_range(p_->info, logits, 0, bytes), pb = bind_range(p_->info, p, 0, bytes);
  const bound sb = sink_count ? bind_range(p_->info, sinks, 0, uint64_t(sink_count) * 4) : bound{p_->dummy(), 0};
  const uint32_t pc[8] = {rows, n, sink_count, lb.residual / 4, sb.residual / 4, pb.residual / 4, 0, 0};
  const binding b[3] = {lb.b, sb.b, pb.b};
  uint32_t gx, gy;
  p_->grid(rows, gx, gy);
  detail::dispatch(c.impl(), p_->pipe("softmax_sink.comp", "", impl::wg_rows, 3, sizeof pc), b, pc, sizeof pc, gx, gy);
}

void kernels::topk(commands& c, view scores, uint32_t rows, uint32_t n, uint32_t k, view idx, bool by_position) {
  if (k > topk_max_k) throw usage_error("topk: k > " + std::to_string(topk_max_k));
  if (rows == 0 || k == 0) return;
  detail::need_view(scores, uint64_t(rows) * n * 4, "topk", "scores");
  detail::need_view(idx, uint64_t(rows) * k * 4, "topk", "idx");
  const bound sb = bind_range(p_->info, scores, 0, std::max<uint64_t>(uint64_t(rows) * n * 4, 4));
  const bound ob = bind_range(p_->info, idx, 0, uint64_t(rows) * k * 4);
  if (k == 1 && n >= argmax_min_n) {
    // Top-1 of long rows (the head's greedy token): the row split over workgroups, then one per row combines.
    if (c.in_concurrent()) throw usage_error("topk with k = 1 on long rows is two dispatches: not inside begin_concurrent");
    const uint32_t groups = uint32_t(std::min<uint64_t>(ceil_div(n, 4 * impl::wg_rows), 128));
    const uint32_t chunk = uint32_t(ceil_div(n, groups));
    const uint64_t pbytes = uint64_t(rows) * groups * 8;
    if (p_->argmax_part.size() < pbytes) {  // grows with rows only; a replaced buffer may still be in flight: kept
      if (p_->argmax_part) p_->retired.push_back(std::move(p_->argmax_part));
      p_->argmax_part = p_->dev.alloc(std::max<uint64_t>(uint64_t(rows) * 128 * 8, 4096));
    }
    const bound pb = bind_range(p_->info, p_->argmax_part, 0, pbytes);
    const uint32_t apc[8] = {rows, n, groups, chunk, sb.residual / 4, ob.residual / 4, n, k};
    const binding ab[3] = {sb.b, pb.b, ob.b};
    uint32_t gx, gy;
    p_->grid(uint64_t(rows) * groups, gx, gy);
    detail::dispatch(c.impl(), p_->pipe("argmax.comp", "#define ARGMAX_PASS 1\n", impl::wg_rows, 3, sizeof apc), ab, apc,
                     sizeof apc, gx, gy);
    p_->grid(rows, gx, gy);
    detail::dispatch(c.impl(), p_->pipe("argmax.comp", "#define ARGMAX_PASS 2\n", impl::wg_rows, 3, sizeof apc), ab, apc,
                     sizeof apc, gx, gy);
    return;
  }
  const uint32_t pc[8] = {rows, n, k, sb.residual / 4, ob.residual / 4, n, k, by_position ? 1u : 0u};
  const binding b[2] = {sb.b, ob.b};
  uint32_t gx, gy;
  p_->grid(rows, gx, gy);
  static_assert(impl::wg_rows >= 256, "topk.comp gives each of its 256 histogram bins an invocation");
  const std::string defs = "#define TOPK_MAX " + std::to_string(topk_max_k) + "\n";
  detail::dispatch(c.impl(), p_->pipe("topk.comp", defs, impl::wg_rows, 2, sizeof pc), b, pc, sizeof pc, gx, gy);
}

void kernels::swiglu_clamp(commands& c, view g, view v, view out, uint64_t n, float limit, float weight) {
  if (n == 0) return;
  detail::need_view(g, n * 4, "swiglu_clamp", "g");
  detail::need_view(v, n * 4, "swiglu_clamp", "v");
  detail::need_view(out, n * 4, "swiglu_clamp", "out");
  const bound gb = bind_range(p_->info, g, 0, n * 4), vb = bind_range(p_->info, v, 0, n * 4),
              ob = bind_range(p_->info, out, 0, n * 4);
  struct {
    uint32_t n, goff, voff, ooff;
    float limit, weight;
    uint32_t pad0, pad1;
  } pc{u32(n, "swiglu n"), gb.residual / 4, vb.residual / 4, ob.residual / 4, limit, weight, 0, 0};
  const binding b[3] = {gb.b, vb.b, ob.b};
  const uint32_t gx = uint32_t(std::min<uint64_t>(ceil_div(n, impl::wg_rows), 4096));
  detail::dispatch(c.impl(), p_->pipe("swiglu.comp", "", impl::wg_rows, 3, sizeof pc), b, &pc, sizeof pc, gx, 1);
}

namespace {
void axpby(kernels::impl& p, commands& c, view x, view y, uint64_t n, float alpha, float beta, const char* op) {
  if (n == 0) return;
  detail::need_view(x, n * 4, op, "x");
  detail::need_view(y, n * 4, op, "y");
  const bound xb = bind_range(p.info, x, 0, n * 4), yb = bind_range(p.info, y, 0, n * 4);
  struct {
    uint32_t n, xoff, yoff, pad0;
    float alpha, beta;
    uint32_t pad1, pad2;
  } pc{u32(n, "axpby n"), xb.residual / 4, yb.residual / 4, 0, alpha, beta, 0, 0};
  const binding b[2] = {xb.b, yb.b};
  const uint32_t gx = uint32_t(std::min<uint64_t>(ceil_div(n, kernels::impl::wg_rows), 4096));
  detail::dispatch(c.impl(), p.pipe("axpby.comp", "", kernels::impl::wg_rows, 2, sizeof pc), b, &pc, sizeof pc, gx, 1);
}
}  // namespace

void kernels::add(commands& c, view x, view y, uint64_t n) { axpby(*p_, c, x, y, n, 1.0f, 1.0f, "add"); }
void kernels::scale(commands& c, view y, uint64_t n, float a) { axpby(*p_, c, y, y, n, 0.0f, a, "scale"); }

void kernels::stream_read(commands& c, view src, view sink) {
  detail::need_view(sink, 16, "stream_read", "sink");
  const uint64_t piece = (p_->info.max_storage_range - 256) / 16 * 16;
  for (uint64_t off = 0; off + 16 <= src.bytes; off += piece) {
    const uint64_t bytes = std::min(piece, src.bytes / 16 * 16 - off);
    const bound sb = bind_range(p_->info, src, off, bytes);
    if (sb.residual % 16) throw usage_error("stream_read: source offset not 16-byte aligned");
    const uint32_t pc[4] = {u32(bytes / 16, "stream words"), 0, 0, 0};
    const binding b[2] = {sb.b, bind_range(p_->info, sink, 0, 16).b};
    detail::dispatch(c.impl(), p_->pipe("stream_read.comp", "", impl::wg_rows, 2, sizeof pc), b, pc, sizeof pc,
                     uint32_t(std::min<uint64_t>(ceil_div(bytes / 16, impl::wg_rows * 4), 4096)), 1);
  }
}

}  // namespace cmfx::gpu
