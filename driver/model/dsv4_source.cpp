#include "dsv4_source.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "cmfx/core/error.hpp"
#include "cmfx/io/cmf_reader.hpp"
#include "cmfx/io/safetensors.hpp"
#include "dsv4_names.hpp"

namespace cmfx::driver {

namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

// ---- CMF ---------------------------------------------------------------------------------------------------------

class cmf_source final : public dsv4_source {
 public:
  explicit cmf_source(const std::string& path) : file_(cmf_file::open(path)) {}
  std::optional<dsv4_tensor> find(const std::string& n) const override {
    const cmf_tensor* t = file_.find(dsv4_cmf_name(n));
    if (!t) return std::nullopt;
    dsv4_tensor r;
    r.name = std::string(t->name);
    r.dtype = std::string(t->dtype_name());
    r.dims = t->dims();
    r.raw = t->data;
    r.fmt = t->weight_format();
    if (r.fmt) r.v = t->view();  // throws for q4tp/q2tp with an unusable shape, naming the tensor
    return r;
  }
  std::string spelled(const std::string& n) const override { return "'" + dsv4_cmf_name(n) + "'"; }
  std::string kind() const override { return "cmf"; }
  dsv4_config config() const override { return dsv4_config_from_cmf(file_.header()); }
  const nlohmann::json& raw_config() const override { return file_.header(); }

 private:
  cmf_file file_;
};

// ---- release (safetensors) ---------------------------------------------------------------------------------------

/// HF spellings of a convert.py name (dsv4-architecture.md §2: self_attn→attn, mlp→ffn, {gate,up,down}_proj→w1/w3/w2,
/// e_score_correction_bias→bias, input/post_attention_layernorm).
std::vector<std::string> hf_aliases(const std::string& n) {
  static const std::pair<const char*, const char*> globals[] = {
      {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
      {"norm.weight", "model.norm.weight"},          {"hc_head_fn", "model.hc_head_fn"},
      {"hc_head_base", "model.hc_head_base"},        {"hc_head_scale", "model.hc_head_scale"}};
  for (const auto& [a, b] : globals)
    if (n == a) return {b};
  static const std::regex layer(R"(^layers\.(\d+)\.(.*)$)");
  std::smatch m;
  if (!std::regex_match(n, m, layer)) return {};
  const std::string p = "model.layers." + m[1].str() + ".";
  std::string rest = m[2].str();
  std::vector<std::string> out;
  if (rest == "attn_norm.weight") out.push_back(p + "input_layernorm.weight");
  if (rest == "ffn_norm.weight") out.push_back(p + "post_attention_layernorm.weight");
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^attn\.(.*)$)"), "self_attn.$1"},
      {std::regex(R"(^ffn\.gate\.bias$)"), "mlp.gate.e_score_correction_bias"},
      {std::regex(R"(^ffn\.gate\.(.*)$)"), "mlp.gate.$1"},
      {std::regex(R"(^ffn\.(experts\.\d+|shared_experts)\.w1\.weight$)"), "mlp.$1.gate_proj.weight"},
      {std::regex(R"(^ffn\.(experts\.\d+|shared_experts)\.w3\.weight$)"), "mlp.$1.up_proj.weight"},
      {std::regex(R"(^ffn\.(experts\.\d+|shared_experts)\.w2\.weight$)"), "mlp.$1.down_proj.weight"},
  };
  for (const auto& [re, fmt] : rules)
    if (std::regex_match(rest, re)) {
      out.push_back(p + std::regex_replace(rest, re, fmt));
      break;
    }
  out.push_back(p + rest);  // same suffix under the HF prefix (hc_*, norms)
  return out;
}

std::optional<format> dense_format(st_dtype d) {
  switch (d) {
    case st_dtype::F32: return format::f32;
    case st_dtype::F16: return format::f16;
    case st_dtype::BF16: return format::bf16;
    default: return std::nullopt;
  }
}

std::string shape_str(const std::vector<uint64_t>& s) { return shape_string(s); }

class release_source final : public dsv4_source {
 public:
  explicit release_source(const std::string& path) : model_(safetensors_model::open(path)) {
    fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
    const fs::path cfg = dir / "config.json";
    std::ifstream in(cfg);
    if (!in) throw usage_error(path + ": release layout needs config.json next to the weights (" + cfg.string() + ")");
    try {
      config_ = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw input_error(cfg.string(), 0, std::string("config.json: ") + e.what());
    }
  }

  std::optional<dsv4_tensor> find(const std::string& n) const override {
    const st_tensor* t = model_.find(n);
    if (!t)
      for (const auto& a : hf_aliases(n))
        if ((t = model_.find(a))) break;
    if (!t) return std::nullopt;
    return bind(*t);
  }
  std::string spelled(const std::string& n) const override {
    std::string s = "'" + n + "'";
    for (const auto& a : hf_aliases(n)) s += " / '" + a + "'";
    return s;
  }
  std::string kind() const override { return "release"; }
  dsv4_config config() const override { return dsv4_config_from_release(config_); }
  const nlohmann::json& raw_config() const override { return config_; }

 private:
  const st_tensor* scale_of(const st_tensor& t) const {
    const std::string stem = ends_with(t.name, ".weight") ? t.name.substr(0, t.name.size() - 7) : t.name;
    for (const char* suf : {".scale", ".weight_scale_inv"})
      if (const st_tensor* s = model_.find(stem + suf)) return s;
    return nullptr;
  }

  dsv4_tensor bind(const st_tensor& t) const {
    dsv4_tensor r;
    r.name = t.name;
    r.dtype = std::string(st_dtype_name(t.dtype));
    r.dims = t.shape;
    r.raw = t.data;
    const uint64_t rows = t.shape.empty() ? 1 : t.shape[0], elems = t.elements();
    const uint64_t cols = rows ? elems / rows : 0;
    if (auto f = dense_format(t.dtype)) {
      r.fmt = f;
      r.v = matrix_view{t.data, t.nbytes, nullptr, 0, scale_encoding::none, rows, cols};
      return r;
    }
    if (t.dtype == st_dtype::I32 || t.dtype == st_dtype::I64) {
      if (t.dtype == st_dtype::I32) r.int_bytes = 4;
      else r.int_bytes = 8;
      return r;
    }
    const st_tensor* s = scale_of(t);
    auto fail = [&](const std::string& why) -> dsv4_tensor {
      throw usage_error("tensor '" + t.name + "' (" + r.dtype + " " + shape_str(t.shape) + "): " + why);
    };
    if (t.dtype != st_dtype::F8_E4M3 && t.dtype != st_dtype::I8) fail("dtype not used by the model graph");
    if (t.shape.size() != 2) fail("expected a 2-D weight");
    if (!s) fail("has no sibling '.scale' / '.weight_scale_inv' tensor");
    const scale_encoding enc = s->dtype == st_dtype::F32 ? scale_encoding::f32 : scale_encoding::e8m0;
    if (s->dtype != st_dtype::F32 && s->dtype != st_dtype::F8_E8M0 && s->dtype != st_dtype::U8)
      fail("scale tensor '" + s->name + "' has dtype " + std::string(st_dtype_name(s->dtype)));
    const std::vector<uint64_t>& ss = s->shape;
    if (t.dtype == st_dtype::F8_E4M3) {
      for (uint64_t tile : {128u, 32u}) {
        if (ss == std::vector<uint64_t>{ceil_div(rows, tile), ceil_div(cols, tile)}) {
          r.fmt = tile == 128 ? format::fp8_b128 : format::fp8_b32;
          r.v = matrix_view{t.data, t.nbytes, s->data, s->nbytes, enc, rows, cols};
          return r;
        }
      }
      // A row-scaled FP8 table (V4.1 Engram: one UE8M0 scale per 32 values of a row, read in place by
      // include/cmfx/model/engram.hpp): not a GEMM format, so it is bound as a view without `fmt`.
      constexpr uint64_t row_block = 32;
      if (cols % row_block == 0 && ss == std::vector<uint64_t>{rows, cols / row_block} && enc == scale_encoding::e8m0) {
        r.v = matrix_view{t.data, t.nbytes, s->data, s->nbytes, enc, rows, cols};
        return r;
      }
      fail("scale '" + s->name + "' has shape " + shape_str(ss) + ", expected [ceil(R/128), ceil(C/128)] = " +
           shape_str({ceil_div(rows, 128), ceil_div(cols, 128)}));
    }
    // FP4 experts: I8 [out, in/2] + scale [out, in/32].
    const uint64_t in = 2 * cols;
    if (in % 32 != 0 || ss != std::vector<uint64_t>{rows, in / 32})
      fail("FP4 scale '" + s->name + "' has shape " + shape_str(ss) + ", expected " + shape_str({rows, in / 32}));
    if (enc != scale_encoding::e8m0) fail("FP4 scales must be UE8M0");
    r.fmt = format::mxfp4;
    r.dims = {rows, in};
    r.v = matrix_view{t.data, t.nbytes, s->data, s->nbytes, enc, rows, in};
    return r;
  }

  safetensors_model model_;
  nlohmann::json config_;
};


}  // namespace

std::shared_ptr<dsv4_source> dsv4_open_source(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw input_error(path, 0, "no such file or directory");
  if (has_cmf_magic(path)) return std::make_shared<cmf_source>(path);
  return std::make_shared<release_source>(path);
}

}  // namespace cmfx::driver
