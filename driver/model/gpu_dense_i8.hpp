#pragma once
// Int8 activations for the batch-1 dense products of a decode step (dsv4_gpu_options::dense_act = i8): the
// attention, compressor and indexer projections, wo_a / wo_b, a shared expert kept apart and the head, where their
// format has an integer-dot kernel (q4tp, q2tp, MXFP4: the CMF files' dense format is q4tp). Each input vector is
// quantised once per format among its consumers (kernels::quantize_act: the layouts of the formats differ), in a
// step of its own before them, and every consumer reads its copy (kernels::matvec_q8). The rule is the CPU's
// (dsv4_options::matmul_act = i8, include/cmfx/kernels/act_q8.hpp), so the two graphs round the same values.
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <stdexcept>

#include "cmfx/formats/format.hpp"
#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/vk/device.hpp"
#include "cmfx/vk/kernels.hpp"

namespace cmfx::driver {

/// The int8 copies of `vectors` input vectors of `cols` values each, one slot per int8 format.
struct gpu_act_q8_slots {
  static constexpr format formats[3] = {format::q4tp, format::q2tp, format::mxfp4};
  gpu::buffer buf;
  uint64_t cols = 0;
  uint32_t vectors = 0;

  void alloc(gpu::device& dev, uint64_t c, uint32_t n = 1) {
    cols = c, vectors = n;
    buf = dev.alloc(std::size(formats) * n * gpu::kernels::act_q8_bytes(c));
  }
  static uint32_t slot(format f) {
    for (uint32_t i = 0; i < std::size(formats); ++i)
      if (formats[i] == f) return i;
    throw std::logic_error("gpu_act_q8_slots: no int8 activations for this format");
  }
  /// Vector v's copy packed for format f (16-byte aligned: act_q8_bytes is a multiple of 16); the copies of one
  /// format lie one after another, as quantize_act writes several vectors.
  gpu::view at(format f, uint32_t v = 0) const {
    const uint64_t b = gpu::kernels::act_q8_bytes(cols);
    return gpu::view(buf, (uint64_t(slot(f)) * vectors + v) * b, b);
  }
  /// All the vectors' copies for format f.
  gpu::view all(format f) const {
    const uint64_t b = gpu::kernels::act_q8_bytes(cols);
    return gpu::view(buf, uint64_t(slot(f)) * vectors * b, vectors * b);
  }
};

/// The dense products of one decode step under an activation precision.
struct gpu_dense_act {
  gpu::kernels& k;
  act_precision act;

  /// Whether the batch-1 product of w reads int8 activations.
  bool i8(const gpu::gpu_matrix& w) const { return act == act_precision::i8 && k.has_i8(w.fmt); }
  /// The first of ws (null entries skipped) that reads int8 activations, or null. (Ws: a braced list, or an array.)
  template <class Ws = std::initializer_list<const gpu::gpu_matrix*>>
  const gpu::gpu_matrix* first(const Ws& ws) const {
    for (const gpu::gpu_matrix* w : ws)
      if (w && i8(*w)) return w;
    return nullptr;
  }
  /// Records the quantisation of x (q.vectors vectors of q.cols values, one after another) into q, once for every
  /// int8 format among ws (null entries skipped); the caller wraps it in a concurrent group where it records more
  /// than one. Returns whether anything was recorded.
  /// skip: a format whose copy the caller writes otherwise (kernels::rmsnorm_q8).
  template <class Ws = std::initializer_list<const gpu::gpu_matrix*>>
  bool quantize(gpu::commands& c, const Ws& ws, gpu::view x, const gpu_act_q8_slots& q,
                const gpu::gpu_matrix* skip = nullptr) const {
    bool done[std::size(gpu_act_q8_slots::formats)] = {};
    if (skip) done[gpu_act_q8_slots::slot(skip->fmt)] = true;
    bool recorded = false;
    for (const gpu::gpu_matrix* w : ws) {
      if (!w || !i8(*w) || done[gpu_act_q8_slots::slot(w->fmt)]) continue;
      done[gpu_act_q8_slots::slot(w->fmt)] = true;
      k.quantize_act(c, w->fmt, x, q.vectors, q.cols, q.all(w->fmt));
      recorded = true;
    }
    return recorded;
  }
  /// Where w (may be null) reads int8 activations: a boundary's finish writes x's copy for w's format
  /// (kernels::hc_finish_args::y_q8, x its y) — then quantize(..., skip = w) leaves that format out.
  void finish_q8(gpu::kernels::hc_finish_args& f, const gpu::gpu_matrix* w, const gpu_act_q8_slots& q) const {
    if (w && i8(*w)) f.y_q8 = q.all(w->fmt), f.y_q8_fmt = w->fmt;
  }
  /// Where w reads int8 activations: the q8 output of kernels::sparse_attention that packs its o into q (all of q's
  /// vectors, for w's format) — the attention's combine writes it, no quantisation step of its own.
  std::optional<gpu::kernels::attn_q8_out> attn_q8(const gpu::gpu_matrix& w, const gpu_act_q8_slots& q) const {
    if (!i8(w)) return std::nullopt;
    return gpu::kernels::attn_q8_out{q.all(w.fmt), w.fmt, uint32_t(q.cols)};
  }
  /// y = W · x: through vector v of q (quantize recorded it in an earlier step) where w takes int8 activations.
  void matvec(gpu::commands& c, const gpu::gpu_matrix& w, gpu::view x, const gpu_act_q8_slots& q, gpu::view y,
              uint32_t v = 0) const {
    if (i8(w))
      k.matvec_q8(c, w, q.at(w.fmt, v), y);
    else
      k.matmul(c, w, x, 1, y);
  }
  /// Rows [r0, r1) of W · x (kernels::matmul_rows / matvec_q8_rows).
  void matvec_rows(gpu::commands& c, const gpu::gpu_matrix& w, uint64_t r0, uint64_t r1, gpu::view x,
                   const gpu_act_q8_slots& q, gpu::view y, uint32_t v = 0) const {
    if (i8(w))
      k.matvec_q8_rows(c, w, r0, r1, q.at(w.fmt, v), y);
    else
      k.matmul_rows(c, w, r0, r1, x, y);
  }
};

}  // namespace cmfx::driver
