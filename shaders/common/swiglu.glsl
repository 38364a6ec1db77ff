// The clamped SwiGLU of ops/routing.hpp swiglu_clamp and kernels/moe.hpp, in f32 and in that order:
//   silu(min(g, L)) · clamp(u, −L, L) · w        (comparisons written as the CPU's std::min / std::clamp: NaN passes)
// Every shader that forms an expert's h (moe_up, moe_up_g, moe_act, quantize_act's SwiGLU mode, swiglu) calls this,
// so their values agree bit for bit.
float swiglu_clamped(float g, float u, float L, float w) {
  const float gc = L < g ? L : g;
  const float vc = u < -L ? -L : (L < u ? L : u);
  const float silu = gc / (1.0 + exp(-gc));
  return silu * vc * w;
}
