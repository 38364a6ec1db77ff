// `cmfx make-toy`: writes the deterministic toy model, in the CMF layout (cortiq names and dtype rules,
// cmf-format.md §2.7) or in the official release layout (safetensors, FP8 + FP4 experts).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/io/cmf_writer.hpp"
#include "cmfx/text/tokenizer.hpp"
#include "commands.hpp"
#include "dsv4_names.hpp"
#include "progress.hpp"
#include "toy_v4.hpp"
#include "toy_v41.hpp"

namespace cmfx::driver {

int write_toy_release(const make_toy_args& a, const toy_v4_config& c);       // cmd_make_toy_release.cpp
int write_toy_release_v41(const make_toy_args& a, const toy_v41_config& c);  // cmd_make_toy_release.cpp

namespace {

/// cortiq's converter rule for the dtype of a tensor (cmf-format.md §2.7), with the profile `quant`.
cmf_dtype cmf_dtype_for(const toy_tensor& t, const std::string& quant) {
  uint64_t n = 1;
  for (auto s : t.shape) n *= s;
  if (t.role == toy_role::tid2eid || quant == "f32") return cmf_dtype::f32;
  if (t.shape.size() != 2 || n < 32 || t.role == toy_role::router || t.role == toy_role::vector) return cmf_dtype::f16;
  if (t.shape[1] % 32 != 0) return cmf_dtype::q8_2f;
  if (quant == "f16") return cmf_dtype::f16;
  if (quant == "q8") return cmf_dtype::q8_row;
  const bool gate_up = t.role == toy_role::expert_gate_up || t.role == toy_role::shared_gate_up;
  return quant == "q2tp" && gate_up ? cmf_dtype::q2tp : cmf_dtype::q4tp;
}

std::vector<uint8_t> encode_as(cmf_dtype d, const std::vector<float>& v, const std::vector<uint32_t>& shape) {
  const uint64_t rows = shape.empty() ? 1 : shape[0], cols = rows ? v.size() / rows : 0;
  std::vector<uint8_t> out;
  const auto f = cmf_dtype_format(uint8_t(d));
  visit_format(*f, [&]<class F>() { out = F::encode(v.data(), rows, cols).data; });
  return out;
}

/// The tokenizer.json to ship with the toy, checked: it must load and fit the toy's vocabulary.
std::string read_tokenizer(const std::string& path, uint32_t vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw usage_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string json = ss.str();
  const tokenizer tok = tokenizer::from_json(json, path);
  if (tok.vocab_size() > vocab)
    throw usage_error(path + ": the tokenizer has " + std::to_string(tok.vocab_size()) + " ids, the toy embeds " +
                      std::to_string(vocab));
  return json;
}

}  // namespace

int run_make_toy(const make_toy_args& args) {
  if (args.arch != "v4" && args.arch != "v41") throw usage_error("make-toy --arch takes v4 or v41, not " + args.arch);
  const bool v41 = args.arch == "v41";
  const toy_v4_config c;
  const toy_v41_config c41;
  make_toy_args a = args;
  if (a.quant.empty()) a.quant = a.layout == "release" ? "native" : "q4tp";
  const uint32_t vocab = v41 ? c41.vocab : c.vocab;
  if (a.layout == "release") {
    if (a.quant != "native" && a.quant != "f32")
      throw usage_error("make-toy --layout release takes --quant native (FP8 + FP4 experts) or f32, not " + a.quant);
    const std::string tok = a.tokenizer.empty() ? std::string() : read_tokenizer(a.tokenizer, vocab);
    const int rc = v41 ? write_toy_release_v41(a, c41) : write_toy_release(a, c);
    if (!tok.empty()) {
      const std::filesystem::path dst = std::filesystem::path(a.out) / "tokenizer.json";
      std::ofstream f(dst, std::ios::binary);
      if (!(f << tok)) throw usage_error("cannot write " + dst.string());
      std::printf("wrote %s/tokenizer.json (from %s)\n", a.out.c_str(), a.tokenizer.c_str());
    }
    return rc;
  }
  if (a.quant == "native")
    throw usage_error("make-toy --quant native is the release layout's dtypes (FP8/FP4), which CMF cannot store; "
                      "use --layout release or a CMF quant (q4tp, q2tp, q8, f16, f32)");
  const std::string tok = a.tokenizer.empty() ? std::string() : read_tokenizer(a.tokenizer, vocab);
  const auto inv = v41 ? toy_v41_inventory(c41) : toy_v4_inventory(c);
  const std::string header = v41 ? toy_v41_cmf_header(c41, a.quant).dump() : toy_v4_cmf_header(c, a.quant).dump();
  auto emit = [&](auto& w) {
    for (const auto& t : inv) {
      const auto v = v41 ? toy_v41_values(c41, t, a.seed) : toy_v4_values(c, t, a.seed);
      const cmf_dtype d = cmf_dtype_for(t, a.quant);
      w.add(dsv4_cmf_name(t.name), d, t.shape, encode_as(d, v, t.shape));
    }
  };
  if (a.stream) {
    cmf_stream_writer w(a.out, header, cmf_stream_writer::default_head_reserve(inv.size()));
    emit(w);
    if (!tok.empty()) w.set_vocab(tok);
    w.finish();
  } else {
    cmf_writer w(header);
    emit(w);
    if (!tok.empty()) w.set_vocab(tok);
    w.write(a.out);
  }
  std::printf("wrote %s: toy DeepSeek-%s (%s, %zu tensors, %u layers, dim %u, vocab %u)\n", a.out.c_str(),
              v41 ? "V4.1" : "V4", a.quant.c_str(), inv.size(), v41 ? c41.layers : c.num_layers(), v41 ? c41.dim : c.dim,
              vocab);
  if (!tok.empty()) std::printf("  vocab section: %s (%zu bytes)\n", a.tokenizer.c_str(), tok.size());
  return 0;
}

}  // namespace cmfx::driver
