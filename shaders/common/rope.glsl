// The rotation of one adjacent pair by (cos c, sin s) (ops/rope.hpp): (a, b) → (a·c − b·s, a·s + b·c) in f32,
// uncontracted as the CPU computes it. rope.comp and rmsnorm.comp's RMS_ROPE mode both call it, so the fused and the
// separate paths agree bit for bit.
vec2 rope_pair(float a, float b, float c, float s) {
  precise float x = a * c - b * s;
  precise float y = a * s + b * c;
  return vec2(x, y);
}
