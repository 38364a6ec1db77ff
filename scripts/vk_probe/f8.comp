#version 460
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 64) in;
#define f8e4m3 spirv_type(extensions = ["SPV_EXT_float8"], capabilities = [4212], id = 22, 8, 4214)
spirv_instruction(extensions = ["SPV_EXT_float8"], capabilities = [4212], id = 124) f8e4m3 as_f8(uint8_t b);
spirv_instruction(id = 115) float16_t to_f16(f8e4m3 v);
spirv_instruction(id = 115) float to_f32(f8e4m3 v);
layout(std430, binding = 0) buffer B { uint inw[]; };
layout(std430, binding = 1) buffer C { float outf[]; };
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i >= 256u) return;
  uint8_t b = uint8_t((inw[i / 4u] >> (8u * (i % 4u))) & 0xFFu);
  outf[i] = float(to_f16(as_f8(b)));
  outf[256u + i] = to_f32(as_f8(b));
}
