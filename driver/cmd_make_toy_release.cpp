// `cmfx make-toy --layout release`: the toy in the official release layout — config.json, two safetensors
// shards and model.safetensors.index.json — with the release's dtypes (dsv4-architecture.md §2): FP8 E4M3
// weights with UE8M0 128x128 `.scale` tensors, FP4 experts as packed I8 [out, in/2] with UE8M0 [out, in/32],
// bf16 norms / wo_a / compressor, f32 sinks / ape / hc / bias / head, int32 tid2eid. `--arch v41`: the V4.1 toy
// with FP8 32x32 tiles (release_dtype_v41).
#include <filesystem>
#include <fstream>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/io/safetensors_writer.hpp"
#include "commands.hpp"
#include "toy_v4.hpp"
#include "toy_v41.hpp"

namespace cmfx::driver {

namespace {

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}
bool contains(const std::string& s, const std::string& e) { return s.find(e) != std::string::npos; }

enum class rel_dtype { f32, bf16, fp8, fp8_rows, fp4, i32 };

rel_dtype release_dtype(const toy_tensor& t) {
  const std::string& n = t.name;
  if (t.role == toy_role::tid2eid) return rel_dtype::i32;
  if (t.role == toy_role::expert_gate_up || t.role == toy_role::expert_down) return rel_dtype::fp4;
  if (ends_with(n, "attn_sink") || ends_with(n, ".ape") || contains(n, "hc_") || ends_with(n, "gate.bias") ||
      n == "head.weight")
    return rel_dtype::f32;
  if (t.role == toy_role::vector || contains(n, "wo_a") || contains(n, "compressor.") || contains(n, "weights_proj") ||
      t.role == toy_role::router || n == "embed.weight")
    return rel_dtype::bf16;
  return rel_dtype::fp8;  // wq_a, wq_b, wkv, wo_b, indexer.wq_b, shared experts
}

std::vector<uint8_t> as_bytes_f32(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// The release layout of any toy: each tensor stored with the dtype `dtype_of` gives (FP8 with UE8M0 tile×tile scales).
template <class ValuesFn, class DtypeFn>
size_t write_release(const make_toy_args& a, const std::vector<toy_tensor>& inv, ValuesFn values, DtypeFn dtype_of,
                     uint32_t fp8_tile, const std::string& config_json) {
  namespace fs = std::filesystem;
  fs::create_directories(a.out);
  std::vector<st_write_entry> shard[2];
  std::map<std::string, std::string> weight_map;
  const std::string shard_name[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  for (size_t i = 0; i < inv.size(); ++i) {
    const toy_tensor& t = inv[i];
    const auto v = values(t);
    std::vector<uint64_t> shape(t.shape.begin(), t.shape.end());
    const uint64_t rows = shape.empty() ? 1 : shape[0], cols = rows ? v.size() / rows : 0;
    const int s = i < inv.size() / 2 ? 0 : 1;
    auto put = [&](const std::string& name, st_dtype dt, std::vector<uint64_t> shp, std::vector<uint8_t> bytes) {
      weight_map[name] = shard_name[s];
      shard[s].push_back({name, dt, std::move(shp), std::move(bytes)});
    };
    const std::string stem = ends_with(t.name, ".weight") ? t.name.substr(0, t.name.size() - 7) : t.name;
    // The f32 profile keeps integer tables and row-scaled FP8 tables (V4.1 Engram) in their release dtype.
    const rel_dtype own = dtype_of(t);
    const rel_dtype rd = a.quant == "f32" && own != rel_dtype::i32 && own != rel_dtype::fp8_rows ? rel_dtype::f32 : own;
    switch (rd) {
      case rel_dtype::f32: put(t.name, st_dtype::F32, shape, as_bytes_f32(v)); break;
      case rel_dtype::bf16: put(t.name, st_dtype::BF16, shape, fmt_bf16::encode(v.data(), rows, cols).data); break;
      case rel_dtype::i32: {
        std::vector<uint8_t> b(v.size() * 4);
        for (size_t k = 0; k < v.size(); ++k) {
          const int32_t id = int32_t(v[k]);
          std::memcpy(b.data() + 4 * k, &id, 4);
        }
        put(t.name, st_dtype::I32, shape, std::move(b));
        break;
      }
      case rel_dtype::fp8: {
        auto e = fp8_tile == 32 ? fmt_fp8_b32::encode(v.data(), rows, cols) : fmt_fp8_b128::encode(v.data(), rows, cols);
        put(t.name, st_dtype::F8_E4M3, shape, std::move(e.data));
        put(stem + ".scale", st_dtype::F8_E8M0, {ceil_div(rows, fp8_tile), ceil_div(cols, fp8_tile)}, std::move(e.scale));
        break;
      }
      case rel_dtype::fp8_rows: {
        auto e = toy_v41_engram_table_fp8(v.data(), rows, cols);
        put(t.name, st_dtype::F8_E4M3, shape, std::move(e.data));
        put(stem + ".scale", st_dtype::F8_E8M0, {rows, cols / toy_v41_engram_scale_block}, std::move(e.scale));
        break;
      }
      case rel_dtype::fp4: {
        auto e = fmt_mxfp4::encode(v.data(), rows, cols);
        put(t.name, st_dtype::I8, {rows, cols / 2}, std::move(e.data));
        put(stem + ".scale", st_dtype::F8_E8M0, {rows, cols / 32}, std::move(e.scale));
        break;
      }
    }
  }
  for (int s = 0; s < 2; ++s) write_safetensors((fs::path(a.out) / shard_name[s]).string(), shard[s], {{"format", "pt"}});
  write_safetensors_index(a.out, weight_map);
  std::ofstream(fs::path(a.out) / "config.json") << config_json << "\n";
  return weight_map.size();
}

/// V4.1 release dtypes (dsv4-architecture.md §2 "V4.1 deltas"): FP8 E4M3 with 32×32 UE8M0 tiles for the attention
/// projections, indexer wq_b, shared experts and engram.wkv; FP4 routed experts; bf16 norms, wo_a, compressor,
/// indexer wk / weights_proj, router, embed; f32 sinks, hc, bias, head. The Engram table is FP8 E4M3 with a UE8M0
/// scale per 32 values of each row (in every profile: its values lie on that grid, toy_v41_values).
rel_dtype release_dtype_v41(const toy_tensor& t) {
  const std::string& n = t.name;
  if (t.role == toy_role::expert_gate_up || t.role == toy_role::expert_down) return rel_dtype::fp4;
  if (ends_with(n, "attn_sink") || contains(n, "hc_") || ends_with(n, "gate.bias") || n == "head.weight")
    return rel_dtype::f32;
  if (t.role == toy_role::vector || contains(n, "wo_a") || contains(n, "compressor.") || contains(n, "weights_proj") ||
      contains(n, "indexer.wk.") || contains(n, "engram.q_weight") ||
      contains(n, "engram.k_weight") || t.role == toy_role::router || n == "embed.weight")
    return rel_dtype::bf16;
  if (contains(n, "engram.embed")) return rel_dtype::fp8_rows;
  return rel_dtype::fp8;  // wq_a, wq_b, wkv, wo_b, indexer.wq_b, shared experts, engram.wkv
}

}  // namespace

int write_toy_release(const make_toy_args& a, const toy_v4_config& c) {
  const size_t n = write_release(
      a, toy_v4_inventory(c), [&](const toy_tensor& t) { return toy_v4_values(c, t, a.seed); }, release_dtype, 128,
      toy_v4_release_config(c).dump(2));
  std::printf("wrote %s/: toy DeepSeek-V4 in the release layout (%zu tensors in 2 shards, %s)\n", a.out.c_str(), n,
              a.quant == "f32" ? "all f32" : "FP8 + FP4 experts");
  return 0;
}

int write_toy_release_v41(const make_toy_args& a, const toy_v41_config& c) {
  const size_t n = write_release(
      a, toy_v41_inventory(c), [&](const toy_tensor& t) { return toy_v41_values(c, t, a.seed); }, release_dtype_v41, 32,
      toy_v41_release_config(c).dump(2));
  std::printf("wrote %s/: toy DeepSeek-V4.1 in the release layout (%zu tensors in 2 shards, %s)\n", a.out.c_str(), n,
              a.quant == "f32" ? "all f32" : "FP8 32x32 + FP4 experts");
  return 0;
}

}  // namespace cmfx::driver
