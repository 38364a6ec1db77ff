// The rotation of one adjacent pair by (cos c, sin s) (ops/rope.hpp): (a, b) → (a·c − b·s, a·s + b·c) in f32,
// uncontracted (the CPU rotates in double and rounds once: within f32 rounding of it). rope.comp, rmsnorm.comp's
// RMS_ROPE mode and the attention's inverse rope (common/att_irope.glsl) all call it, so the fused and the separate
// paths agree bit for bit.
vec2 rope_pair(float a, float b, float c, float s) {
  precise float x = a * c - b * s;
  precise float y = a * s + b * c;
  return vec2(x, y);
}
