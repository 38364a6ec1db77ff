// f32 → f16 with saturation, for the f16 tiles of the tensor-core kernels (gemm.comp, moe_tc.comp,
// moe_tc_gather.comp): a value beyond the f16 range becomes ±65504, never ±inf (an inf product would turn a whole
// output row into NaN through inf − inf). Each pair is rounded (RTE) then clamped in f16, which maps an overflow's
// ±inf to ±65504. Needs GL_EXT_shader_explicit_arithmetic_types_float16.
uint h2sat(float a, float b) { return packFloat2x16(clamp(f16vec2(a, b), f16vec2(-65504.0), f16vec2(65504.0))); }
uvec2 h4sat(vec4 v) { return uvec2(h2sat(v.x, v.y), h2sat(v.z, v.w)); }
