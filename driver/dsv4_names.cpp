#include "dsv4_names.hpp"

#include <regex>
#include <utility>
#include <vector>

namespace cmfx::driver {

std::string dsv4_cmf_name(const std::string& n) {
  // Whole-name globals.
  static const std::pair<const char*, const char*> globals[] = {
      {"embed.weight", "model.embed_tokens.weight"}, {"head.weight", "lm_head.weight"},
      {"norm.weight", "model.norm.weight"},          {"hc_head_fn", "model.hc_head_fn"},
      {"hc_head_base", "model.hc_head_base"},        {"hc_head_scale", "model.hc_head_scale"}};
  for (const auto& [a, b] : globals)
    if (n == a) return b;
  if (n.rfind("mtp.", 0) == 0) return "model." + n;  // DSpark stages keep DeepSeek spellings
  static const std::regex layer(R"(^layers\.(\d+)\.(.*)$)");
  std::smatch m;
  if (!std::regex_match(n, m, layer)) return n;
  const std::string p = "model.layers." + m[1].str() + ".", rest = m[2].str();
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^attn_norm\.weight$)"), "input_layernorm.weight"},
      {std::regex(R"(^ffn_norm\.weight$)"), "post_attention_layernorm.weight"},
      {std::regex(R"(^attn\.(.*)$)"), "self_attn.$1"},
      {std::regex(R"(^ffn\.gate\.weight$)"), "mlp.gate.weight"},
      {std::regex(R"(^ffn\.gate\.bias$)"), "mlp.expert_bias"},
      {std::regex(R"(^ffn\.gate\.tid2eid$)"), "mlp.tid2eid"},
      {std::regex(R"(^ffn\.experts\.(\d+)\.w1\.weight$)"), "mlp.experts.$1.gate_proj.weight"},
      {std::regex(R"(^ffn\.experts\.(\d+)\.w3\.weight$)"), "mlp.experts.$1.up_proj.weight"},
      {std::regex(R"(^ffn\.experts\.(\d+)\.w2\.weight$)"), "mlp.experts.$1.down_proj.weight"},
      {std::regex(R"(^ffn\.shared_experts\.w1\.weight$)"), "mlp.shared_expert.gate_proj.weight"},
      {std::regex(R"(^ffn\.shared_experts\.w3\.weight$)"), "mlp.shared_expert.up_proj.weight"},
      {std::regex(R"(^ffn\.shared_experts\.w2\.weight$)"), "mlp.shared_expert.down_proj.weight"},
      {std::regex(R"(^(hc_(attn|ffn)_(fn|base|scale))$)"), "$1"},
      {std::regex(R"(^(engram\..*)$)"), "$1"},  // V4.1 Engram tables and projections keep their names
  };
  for (const auto& [re, fmt] : rules)
    if (std::regex_match(rest, re)) return p + std::regex_replace(rest, re, fmt);
  return n;
}

}  // namespace cmfx::driver
