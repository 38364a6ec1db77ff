// The model hyper-parameter readers (driver/model/dsv4_config.cpp, dsv41_config.cpp, model_common.hpp
// config_convert): a hostile config.json or CMF header gets a usage_error naming the key, never a raw JSON
// exception, a truncated float or a wrapped negative number (found by fuzz/config_fuzz.cpp).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cmfx/core/error.hpp"
#include "model/dsv41_config.hpp"
#include "model/dsv4_config.hpp"
#include "model/expect_usage_error.hpp"

namespace {

using cmfx::usage_error;
using nlohmann::json;
using namespace cmfx::driver;

json v4_release() {
  return {{"model_type", "deepseek_v4"}, {"vocab_size", 1000},       {"hidden_size", 64},
          {"num_hidden_layers", 3},      {"num_attention_heads", 4}, {"head_dim", 64}};
}

TEST(ConfigRead, ReleaseV4TakesTheKeys) {
  json j = v4_release();
  j["eos_token_id"] = json::array({7, 8});
  j["rope_scaling"] = {{"factor", 16}, {"original_max_position_embeddings", 65536}};
  const dsv4_config c = dsv4_config_from_release(j);
  EXPECT_EQ(c.layers, 3u);
  EXPECT_EQ(c.dim, 64u);
  EXPECT_EQ(c.eos, 7u);
  EXPECT_DOUBLE_EQ(c.yarn_factor, 16.0);
  j["eos_token_id"] = 9;
  EXPECT_EQ(dsv4_config_from_release(j).eos, 9u);
}

TEST(ConfigRead, ReleaseV4RejectsWrongNumbers) {
  for (const json& bad : {json(-3), json(4.5), json("3"), json(uint64_t(1) << 40), json(true), json::array({3})}) {
    json j = v4_release();
    j["num_hidden_layers"] = bad;
    expect_usage_error_naming([&] { (void)dsv4_config_from_release(j); }, "num_hidden_layers");
  }
  json j = v4_release();
  j["num_hidden_layers"] = nullptr;  // a null needed key is missing
  expect_usage_error_naming([&] { (void)dsv4_config_from_release(j); }, "num_hidden_layers");
  j = v4_release();
  j["eos_token_id"] = json::array({"x"});
  expect_usage_error_naming([&] { (void)dsv4_config_from_release(j); }, "eos_token_id");
  j = v4_release();
  j["compress_ratios"] = json::array({4, -128});
  expect_usage_error_naming([&] { (void)dsv4_config_from_release(j); }, "compress_ratios");
  j = v4_release();
  j["rms_norm_eps"] = "1e-6";
  expect_usage_error_naming([&] { (void)dsv4_config_from_release(j); }, "rms_norm_eps");
  EXPECT_THROW((void)dsv4_config_from_release(json::array({1, 2})), usage_error);  // not an object
}

TEST(ConfigRead, CmfHeaderNeedsAnArchObject) {
  expect_usage_error_naming([] { (void)dsv4_config_from_cmf(json::object()); }, "arch");
  expect_usage_error_naming([] { (void)dsv4_config_from_cmf({{"arch", 5}}); }, "arch");
  expect_usage_error_naming([] { (void)dsv4_config_from_cmf(json::array()); }, "arch");
  const json a = {{"arch_name", "deepseek_v4"}, {"hidden_size", 64},  {"num_layers", 3},
                  {"num_attention_heads", 4},    {"head_dim", 64},     {"vocab_size", 1000}};
  json h = {{"arch", a}, {"tokenizer_config", {{"eos_token_ids", json::array({5})}}}};
  EXPECT_EQ(dsv4_config_from_cmf(h).eos, 5u);
  h["tokenizer_config"]["eos_token_ids"] = json::array({-1});
  expect_usage_error_naming([&] { (void)dsv4_config_from_cmf(h); }, "eos_token_ids");
}

TEST(ConfigRead, ReleaseV41RejectsWrongTypes) {
  expect_usage_error_naming(
      [] { (void)dsv41_config_from_release({{"model_type", "deepseek_v41"}, {"text_config", 3}}); }, "text_config");
  expect_usage_error_naming([] { (void)dsv41_config_from_release({{"model_type", 41}}); }, "model_type");
  expect_usage_error_naming(
      [] {
        (void)dsv41_config_from_release(
            {{"model_type", "deepseek_v41_text"}, {"vocab_size", -5}, {"hidden_size", 64}});
      },
      "vocab_size");
}

}  // namespace
