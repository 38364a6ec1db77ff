// Stacking the experts' matrices into one device matrix per role (upload_experts / upload_moe) and the expert
// cache's slots (write_moe_slot, moe_slot_sources, record_moe_slot, moe_slot_bytes); the MoE's dispatches are in
// kernels_moe.cpp.
#include <cstring>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/moe.hpp"
#include "formats_gpu.hpp"
#include "kernels_ops.hpp"

namespace cmfx::gpu {

namespace {

std::string expert_name(size_t i) { return "matrix " + std::to_string(i); }

/// Device buffers for the stacked matrices of `count` matrices shaped like v (format f); defined below.
gpu_experts alloc_stacked(device& dev, const std::string& fn, format f, const matrix_view& v, uint64_t count);

/// The layout of `count` matrices of format f (R×C, scale encoding enc) stacked into one device matrix, checked
/// against the stacking rules (q8_2f, FP8 scale tiles, groups straddling two matrices). `who` prefixes errors.
struct stack_plan {
  gpu_matrix one, st;  // one matrix and the stacked matrix (format and shape only)
  uint64_t data_bytes = 0, scale_bytes = 0, one_data = 0, one_scale = 0;
  uint32_t block_rows = 1;
  detail::slice src;  // the planes of one matrix
};

stack_plan plan_stack(const std::string& who, format f, scale_encoding enc, uint64_t R, uint64_t C, uint64_t count) {
  if (f == format::q8_2f)
    throw usage_error(who +
                      ": q8_2f has one column-scale vector per matrix, so experts cannot share one "
                      "stacked matrix; use matmul per expert");
  stack_plan p;
  p.one.fmt = f, p.one.scale_enc = enc, p.one.rows = R, p.one.cols = C;
  p.st.fmt = f, p.st.scale_enc = enc, p.st.rows = count * R, p.st.cols = C;
  bool ok = false;
  visit_format(f, [&]<class F>() {
    const uint64_t sb = enc == scale_encoding::f32 ? 4 : 1;
    ok = F::shape_ok(R, C) && F::shape_ok(count * R, C);
    p.data_bytes = F::data_bytes(count * R, C), p.scale_bytes = F::scale_bytes(count * R, C) * sb;
    p.one_data = F::data_bytes(R, C), p.one_scale = F::scale_bytes(R, C) * sb;
    p.block_rows = F::block_rows;
  });
  if (!ok)
    throw usage_error(who + ": " + std::string(format_name(f)) + " cannot hold " + std::to_string(R) + "x" +
                      std::to_string(C) + " experts");
  if (R % p.block_rows)
    throw usage_error(who + ": " + std::to_string(R) + " rows per expert is not a multiple of the format's " +
                      std::to_string(p.block_rows) + "-row scale tiles");
  p.src = detail::slice_of(p.one, 0, R);
  return p;
}

/// One plane of matrix e of the stack: bytes at offset `from` of the matrix's data (or scale) tensor go to offset
/// `to` of the stacked data (or scale) tensor.
struct plane_copy {
  bool in_scale = false;
  uint64_t from = 0, to = 0, bytes = 0;
};

/// The planes of matrix e of the stack (upload_experts and write_moe_slot place them alike).
std::vector<plane_copy> plane_copies(const std::string& who, const stack_plan& p, uint64_t e) {
  const uint64_t R = p.one.rows;
  const detail::slice dst = detail::slice_of(p.st, e * R, (e + 1) * R);
  if (dst.e_off != 0 || p.src.e_off != 0)
    throw usage_error(who + ": an expert's " + std::to_string(R * p.one.cols) +
                      " elements do not end on a group boundary of " + std::string(format_name(p.one.fmt)));
  std::vector<plane_copy> out;
  for (int i = 0; i < 3; ++i) {
    if (p.src.bytes[i] == 0) continue;
    uint64_t off = dst.off[i], bytes = dst.bytes[i];
    if (p.src.in_scale[i] && p.block_rows > 1) off = e * p.src.bytes[i], bytes = p.src.bytes[i];  // whole tiles
    if (bytes != p.src.bytes[i])
      throw usage_error(who + ": plane " + std::to_string(i) + " of " + std::string(format_name(p.one.fmt)) +
                        " cannot be stacked");
    if (off + bytes > (p.src.in_scale[i] ? p.scale_bytes : p.data_bytes))
      throw usage_error(who + ": stacked plane out of range");
    out.push_back({p.src.in_scale[i], p.src.off[i], off, bytes});
  }
  return out;
}

}  // namespace

gpu_experts upload_experts(device& dev, format f, std::span<const matrix_view> mats) {
  if (mats.empty()) throw usage_error("upload_experts: no matrices");
  const matrix_view& m0 = mats[0];
  const uint64_t E = mats.size(), R = m0.rows, C = m0.cols;
  const stack_plan p = plan_stack("upload_experts", f, m0.scale_enc, R, C, E);
  for (size_t i = 0; i < mats.size(); ++i) {
    const matrix_view& m = mats[i];
    if (m.rows != R || m.cols != C || m.scale_enc != m0.scale_enc || m.data_bytes != m0.data_bytes ||
        m.scale_bytes != m0.scale_bytes)
      throw usage_error("upload_experts: " + expert_name(i) +
                        " differs from matrix 0 in shape, scale encoding or size");
  }
  if (m0.data_bytes != p.one_data || m0.scale_bytes != p.one_scale)
    throw usage_error("upload_experts: payload or scale size does not match the format");
  // The stacking rule checked on a host copy of two experts (the first and the last matrix): the stacked layout
  // decodes their first and last rows exactly as the matrices themselves (the rule is the same for every count).
  {
    const stack_plan p2 = plan_stack("upload_experts", f, m0.scale_enc, R, C, 2);
    std::vector<uint8_t> data(p2.data_bytes, 0), scale(p2.scale_bytes, 0);
    const uint64_t pick[2] = {0, E - 1};
    for (uint64_t i = 0; i < 2; ++i)
      for (const plane_copy& pc : plane_copies("upload_experts", p2, i))
        std::memcpy((pc.in_scale ? scale : data).data() + pc.to,
                    (pc.in_scale ? mats[pick[i]].scale : mats[pick[i]].data) + pc.from, pc.bytes);
    const matrix_view sv{
        data.data(), data.size(), scale.empty() ? nullptr : scale.data(), scale.size(), m0.scale_enc, 2 * R, C};
    visit_format(f, [&]<class F>() {
      std::vector<float> a(C), b(C);
      for (uint64_t i = 0; i < 2; ++i)
        for (uint64_t r : {uint64_t(0), R - 1}) {
          F::decode_row(mats[pick[i]], r, a.data());
          F::decode_row(sv, i * R + r, b.data());
          if (std::memcmp(a.data(), b.data(), C * 4) != 0)
            throw usage_error("upload_experts: stacking " + std::string(format_name(f)) + " changed row " +
                              std::to_string(r) + " of " + expert_name(pick[i]));
        }
    });
  }
  // Every matrix's planes straight into the stacked device buffers (no host-side stacked copy).
  gpu_experts out = alloc_stacked(dev, "upload_experts", f, m0, E);  // zero-filled
  std::vector<upload_piece> pieces;
  for (uint64_t e = 0; e < E; ++e)
    for (const plane_copy& pc : plane_copies("upload_experts", p, e))
      pieces.push_back({view(pc.in_scale ? out.w.scale : out.w.data, pc.to, pc.bytes),
                        (pc.in_scale ? mats[e].scale : mats[e].data) + pc.from, pc.bytes});
  dev.upload_batch(pieces);
  return out;
}

namespace {

/// x has the formats and shapes of x0 (gate/up [I, d], down [d, I]); `fn` names the caller in errors.
void check_like(const std::string& fn, const expert_view& x, const expert_view& x0, const std::string& who,
                bool is_shared) {
  if (x.gate_fmt != x0.gate_fmt || x.up_fmt != x0.up_fmt || x.down_fmt != x0.down_fmt)
    throw usage_error(fn + ": " + who + " has other formats than expert 0" +
                      (is_shared ? " (run the shared expert with matmul / swiglu_clamp / matmul)" : ""));
  if (x.gate.rows != x0.gate.rows || x.gate.cols != x0.gate.cols || x.up.rows != x0.gate.rows ||
      x.up.cols != x0.gate.cols || x.down.rows != x0.gate.cols || x.down.cols != x0.gate.rows)
    throw usage_error(fn + ": " + who + " shapes are not gate/up [I, d], down [d, I] of expert 0");
}

/// The planes of matrix `index` of the stack e (a layer from alloc_moe_slots), checked against v (nullptr: layout
/// only): visit(plane, device view of its place in the stack).
template <class Visit>
void stacked_planes(const std::string& fn, const gpu_experts& e, uint64_t index, const matrix_view* vp,
                    const char* role, Visit&& visit) {
  const gpu_matrix& w = e.w;
  const stack_plan p = plan_stack(fn, w.fmt, w.scale_enc, e.rows_per_expert, w.cols, e.count);
  if (vp) {
    const matrix_view& v = *vp;
    if (v.rows != e.rows_per_expert || v.cols != w.cols || v.scale_enc != w.scale_enc || v.data_bytes != p.one_data ||
        v.scale_bytes != p.one_scale)
      throw usage_error(fn + ": " + role + " is " + std::to_string(v.rows) + "x" + std::to_string(v.cols) + " with " +
                        std::to_string(v.data_bytes) + " + " + std::to_string(v.scale_bytes) +
                        " bytes (or another scale encoding); the layer's is " + std::to_string(e.rows_per_expert) +
                        "x" + std::to_string(w.cols) + " with " + std::to_string(p.one_data) + " + " +
                        std::to_string(p.one_scale));
  }
  for (const plane_copy& pc : plane_copies(fn, p, index)) visit(pc, view(pc.in_scale ? w.scale : w.data, pc.to, pc.bytes));
}

/// The three matrices of expert slot `index` of m in the packed order (gate, up, down; planes in order), each
/// plane with the expert's matrix view (nullptr: layout only).
template <class Visit>
void expert_planes(const std::string& fn, const gpu_moe& m, uint64_t index, const expert_view* x, Visit&& visit) {
  if (x && (x->gate_fmt != m.gate_up.w.fmt || x->up_fmt != m.gate_up.w.fmt || x->down_fmt != m.down.w.fmt))
    throw usage_error(fn + ": the expert's formats are not the layer's");
  const matrix_view* v[3] = {x ? &x->gate : nullptr, x ? &x->up : nullptr, x ? &x->down : nullptr};
  stacked_planes(fn, m.gate_up, 2 * index, v[0], "gate", [&](const plane_copy& pc, const view& d) { visit(v[0], pc, d); });
  stacked_planes(fn, m.gate_up, 2 * index + 1, v[1], "up", [&](const plane_copy& pc, const view& d) { visit(v[1], pc, d); });
  stacked_planes(fn, m.down, index, v[2], "down", [&](const plane_copy& pc, const view& d) { visit(v[2], pc, d); });
}

/// Copies the planes of matrix `index` of the stack e (a layer from alloc_moe_slots) from v.
void write_stacked(device& dev, const std::string& fn, const gpu_experts& e, uint64_t index, const matrix_view& v,
                   const char* role) {
  const gpu_matrix& w = e.w;
  const stack_plan p = plan_stack(fn, w.fmt, w.scale_enc, e.rows_per_expert, w.cols, e.count);
  if (v.rows != e.rows_per_expert || v.cols != w.cols || v.scale_enc != w.scale_enc || v.data_bytes != p.one_data ||
      v.scale_bytes != p.one_scale)
    throw usage_error(fn + ": " + role + " is " + std::to_string(v.rows) + "x" + std::to_string(v.cols) + " with " +
                      std::to_string(v.data_bytes) + " + " + std::to_string(v.scale_bytes) +
                      " bytes (or another scale encoding); the layer's is " + std::to_string(e.rows_per_expert) + "x" +
                      std::to_string(w.cols) + " with " + std::to_string(p.one_data) + " + " +
                      std::to_string(p.one_scale));
  for (const plane_copy& pc : plane_copies(fn, p, index))
    dev.upload(view(pc.in_scale ? w.scale : w.data, pc.to, pc.bytes), (pc.in_scale ? v.scale : v.data) + pc.from,
               pc.bytes);
}

/// Writes expert x (checked against the layer) at stacked index `index` of m.
void write_expert(device& dev, const std::string& fn, const gpu_moe& m, uint64_t index, const expert_view& x) {
  if (x.gate_fmt != m.gate_up.w.fmt || x.up_fmt != m.gate_up.w.fmt || x.down_fmt != m.down.w.fmt)
    throw usage_error(fn + ": the expert's formats are not the layer's");
  write_stacked(dev, fn, m.gate_up, 2 * index, x.gate, "gate");
  write_stacked(dev, fn, m.gate_up, 2 * index + 1, x.up, "up");
  write_stacked(dev, fn, m.down, index, x.down, "down");
}

/// Device buffers for the stacked matrices of `count` matrices shaped like v (format f).
gpu_experts alloc_stacked(device& dev, const std::string& fn, format f, const matrix_view& v, uint64_t count) {
  const stack_plan p = plan_stack(fn, f, v.scale_enc, v.rows, v.cols, count);
  if (v.data_bytes != p.one_data || v.scale_bytes != p.one_scale)
    throw usage_error(fn + ": payload or scale size does not match the format");
  for (uint64_t e : {uint64_t(0), count - 1}) (void)plane_copies(fn, p, e);  // stackable (same rule for every e)
  gpu_experts out;
  out.w.fmt = f, out.w.scale_enc = v.scale_enc, out.w.rows = p.st.rows, out.w.cols = p.st.cols;
  out.w.data = dev.alloc(p.data_bytes);
  if (p.scale_bytes) out.w.scale = dev.alloc(p.scale_bytes);
  out.count = uint32_t(count);
  out.rows_per_expert = v.rows;
  {  // bytes no plane covers (layout padding) read as zero
    commands z = dev.begin();
    z.fill(out.w.data, out.w.data.size() / 4 * 4, 0u);
    if (out.w.scale) z.fill(out.w.scale, out.w.scale.size() / 4 * 4, 0u);
    dev.submit(z);
  }
  return out;
}

}  // namespace

gpu_moe upload_moe(device& dev, std::span<const expert_view> experts, const expert_view* shared) {
  if (experts.empty()) throw usage_error("upload_moe: no experts");
  const expert_view& x0 = experts[0];
  if (x0.gate_fmt != x0.up_fmt) throw usage_error("upload_moe: gate and up must share one format");
  std::vector<matrix_view> gu, dn;
  auto add = [&](const expert_view& x, const std::string& who) {
    check_like("upload_moe", x, x0, who, &x == shared);
    gu.push_back(x.gate);
    gu.push_back(x.up);
    dn.push_back(x.down);
  };
  for (size_t e = 0; e < experts.size(); ++e) add(experts[e], "expert " + std::to_string(e));
  if (shared) add(*shared, "the shared expert");
  gpu_moe m;
  m.gate_up = upload_experts(dev, x0.gate_fmt, gu);
  m.down = upload_experts(dev, x0.down_fmt, dn);
  m.experts = uint32_t(experts.size());
  m.shared = shared != nullptr;
  m.dim = x0.gate.cols;
  m.inter = x0.gate.rows;
  return m;
}

gpu_moe alloc_moe_slots(device& dev, const expert_view& proto, uint32_t experts, uint32_t slots,
                        const expert_view* shared) {
  const std::string fn = "alloc_moe_slots";
  if (experts == 0 || slots == 0) throw usage_error(fn + ": experts and slots must be > 0");
  if (proto.gate_fmt != proto.up_fmt) throw usage_error(fn + ": gate and up must share one format");
  check_like(fn, proto, proto, "expert 0", false);
  if (shared) check_like(fn, *shared, proto, "the shared expert", true);
  const uint64_t count = uint64_t(slots) + (shared ? 1 : 0);
  gpu_moe m;
  m.gate_up = alloc_stacked(dev, fn, proto.gate_fmt, proto.gate, 2 * count);
  m.down = alloc_stacked(dev, fn, proto.down_fmt, proto.down, count);
  m.experts = experts;
  m.slots = slots;
  m.shared = shared != nullptr;
  m.dim = proto.gate.cols;
  m.inter = proto.gate.rows;
  if (shared) write_expert(dev, fn, m, slots, *shared);
  return m;
}

void write_moe_slot(device& dev, const gpu_moe& m, uint32_t slot, const expert_view& ex) {
  const std::string fn = "write_moe_slot";
  if (m.slots == 0) throw usage_error(fn + ": the layer is fully resident (no slots)");
  if (slot >= m.slots)
    throw usage_error(fn + ": slot " + std::to_string(slot) + " of a layer of " + std::to_string(m.slots) + " slots");
  write_expert(dev, fn, m, slot, ex);
}

std::vector<std::pair<const uint8_t*, uint64_t>> moe_slot_sources(const gpu_moe& m, const expert_view& ex) {
  const std::string fn = "moe_slot_sources";
  if (m.slots == 0) throw usage_error(fn + ": the layer is fully resident (no slots)");
  std::vector<std::pair<const uint8_t*, uint64_t>> out;
  expert_planes(fn, m, 0, &ex, [&](const matrix_view* v, const plane_copy& pc, const view&) {
    out.emplace_back((pc.in_scale ? v->scale : v->data) + pc.from, pc.bytes);
  });
  return out;
}


void record_moe_slot(commands& c, const gpu_moe& m, uint32_t slot, const view& src) {
  const std::string fn = "record_moe_slot";
  if (m.slots == 0) throw usage_error(fn + ": the layer is fully resident (no slots)");
  if (slot >= m.slots)
    throw usage_error(fn + ": slot " + std::to_string(slot) + " of a layer of " + std::to_string(m.slots) + " slots");
  if (src.bytes < moe_slot_bytes(m)) throw usage_error(fn + ": the packed image is shorter than moe_slot_bytes");
  uint64_t off = 0;
  expert_planes(fn, m, slot, nullptr, [&](const matrix_view*, const plane_copy& pc, const view& d) {
    c.copy(view(*src.buf, src.offset + off, pc.bytes), d, pc.bytes);
    off += pc.bytes;
  });
}

uint64_t moe_slot_bytes(const gpu_moe& m) {
  uint64_t total = 0;
  for (const gpu_experts* e : {&m.gate_up, &m.down}) {
    if (e->count == 0) continue;
    const stack_plan p = plan_stack("moe_slot_bytes", e->w.fmt, e->w.scale_enc, e->rows_per_expert, e->w.cols,
                                    e->count);
    for (const plane_copy& pc : plane_copies("moe_slot_bytes", p, 0)) total += pc.bytes * (e == &m.gate_up ? 2 : 1);
  }
  return total;
}

}  // namespace cmfx::gpu
