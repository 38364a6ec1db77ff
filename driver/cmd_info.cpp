// `cmfx info FILE|DIR`: architecture, tensor count, dtype histogram with bytes, config keys; --json for machines.
#include <sys/stat.h>

#include <cstdio>
#include <map>

#include "cmfx/io/cmf_reader.hpp"
#include "commands.hpp"
#include "model/dsv41_config.hpp"
#include "model/dsv41_state.hpp"
#include "model/dsv4_source.hpp"
#include "model/dsv4_state.hpp"
#include "model/dsv4_weights.hpp"
#include "listing.hpp"
#include "progress.hpp"

namespace cmfx::driver {

namespace {

struct dtype_stat {
  uint64_t count = 0, bytes = 0, elements = 0;
};

std::map<std::string, dtype_stat> histogram(const model_listing& l) {
  std::map<std::string, dtype_stat> h;
  for (const auto& t : l.tensors) {
    auto& s = h[t.dtype];
    ++s.count;
    s.bytes += t.bytes;
    uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    s.elements += n;
  }
  return h;
}

/// V4.1 (nested text/vision config or a deepseek_v41 CMF header): the layer plan and which parts this build runs.
nlohmann::json v41_report(const std::string& path) {
  const auto src = dsv4_open_source(path);
  const nlohmann::json& raw = src->raw_config();
  const bool cmf = src->kind() == "cmf";
  if (!(cmf ? dsv41_is_cmf_header(raw) : dsv41_is_release_config(raw))) return nullptr;
  const dsv41_config c = cmf ? dsv41_config_from_cmf(raw) : dsv41_config_from_release(raw);
  nlohmann::json j;
  j["model"] = "DeepSeek-V4.1";
  j["text_config"] = cmf ? "header.dsv41" : (raw.contains("text_config") ? "text_config" : "flat");
  j["vision_config"] = !cmf && raw.contains("vision_config");
  j["layers"] = c.layers;
  std::string modes;
  for (const auto& p : c.plan) {
    if (!modes.empty()) modes += ' ';
    modes += dsv41_mode_name(p.mode);
    if (p.ratio) {
      modes += '/';
      modes += std::to_string(p.ratio);
    }
  }
  j["layer_modes"] = modes;
  j["kv_sources"] = c.kv_sources;
  j["index_sources"] = c.index_sources;
  j["candidate_source"] = c.candidate_source;
  j["engram_layers"] = c.engram_layers;
  const bool engram_ok = c.engram_layers.empty() || c.engram_token_map == "mod";
  j["runs"] = {{"text trunk (CSA2 attention, lagged mHC, MoE; FP8 32x32 + FP4 experts)", true},
               {"engram", engram_ok},
               {"vision encoder", false},
               {"dspark drafting", false}};
  j["not_yet"] = nlohmann::json::array();
  if (!engram_ok)
    j["not_yet"].push_back("Engram's compressed token map (built from the tokenizer; the FP8 row-scaled tables are read)");
  j["not_yet"].push_back("vision encoder and image spans (bias_vl routing)");
  j["not_yet"].push_back("DSpark speculative drafting (mtp stages)");
  return j;
}

}  // namespace

int run_info(const info_args& a) {
  model_listing l;
  try {
    l = has_cmf_magic(a.path) ? list_cmf(a.path) : list_safetensors(a.path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx info: %s\n", e.what());
    return 2;
  }
  const auto hist = histogram(l);
  nlohmann::json v41;
  try {
    v41 = v41_report(a.path);
  } catch (const std::exception& e) {
    v41 = {{"model", "DeepSeek-V4.1"}, {"error", e.what()}};
  }
  nlohmann::json state_json;
  if (a.state && v41.is_object() && !v41.contains("error")) {
    // V4.1: the cache format's storage (include/cmfx/kv/packed_kv.hpp v41_state_bytes) from the config alone.
    try {
      const auto src = dsv4_open_source(a.path);
      const dsv41_config c =
          src->kind() == "cmf" ? dsv41_config_from_cmf(src->raw_config()) : dsv41_config_from_release(src->raw_config());
      const v41_state_config shape = dsv41_state_shape(c);
      const v41_state_size z = v41_state_bytes(shape, a.ctx);
      state_json = {{"ctx", a.ctx},
                    {"format", "v41_packed"},
                    {"kv_source_ratios", shape.kv_source_ratios},
                    {"main_kv_bytes", z.main_kv_bytes},
                    {"index_k_bytes", z.index_k_bytes},
                    {"global_kv_bytes", z.global_kv_bytes()},
                    {"global_kv_bytes_per_token", a.ctx ? double(z.global_kv_bytes()) / double(a.ctx) : 0.0},
                    {"window_bytes", z.window_bytes},
                    {"window_rings", shape.layers + shape.dspark_stages},
                    {"window_rows", shape.window},
                    {"compressor_bytes", z.compressor_bytes},
                    {"engram_bytes", z.engram_bytes},
                    {"total_bytes", z.total()},
                    {"bytes_per_token", a.ctx ? double(z.total()) / double(a.ctx) : 0.0},
                    {"cpu_f32_window_ring_bytes", dsv41_f32_ring_bytes(c)}};
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cmfx info --state: %s\n", e.what());
      return 2;
    }
  } else if (a.state) {
    try {
      const dsv4_weights w = dsv4_load(a.path);
      const dsv4_state_size z = dsv4_state_bytes(w.cfg, a.ctx);
      state_json = {{"ctx", a.ctx},
                    {"ring_bytes", z.ring_bytes},
                    {"compressor_window_bytes", z.comp_window_bytes},
                    {"kv_entry_bytes", z.kv_entry_bytes},
                    {"index_entry_bytes", z.index_entry_bytes},
                    {"total_bytes", z.total()},
                    {"bytes_per_token", a.ctx ? double(z.total()) / double(a.ctx) : 0.0}};
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cmfx info --state: %s\n", e.what());
      return 2;
    }
  }
  if (a.json) {
    nlohmann::json j;
    j["path"] = l.path;
    j["container"] = l.container;
    j["architecture"] = l.architecture;
    j["files"] = l.files;
    j["file_bytes"] = l.file_bytes;
    j["tensor_count"] = l.tensors.size();
    auto& ts = j["tensors"] = nlohmann::json::array();
    for (const auto& t : l.tensors) ts.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"bytes", t.bytes}});
    auto& dh = j["dtypes"] = nlohmann::json::object();
    for (const auto& [k, s] : hist) dh[k] = {{"tensors", s.count}, {"bytes", s.bytes}, {"elements", s.elements}};
    j["config"] = l.config;
    j["container_details"] = l.extra;
    if (a.state) j["state"] = state_json;
    if (!v41.is_null()) j["v41"] = v41;
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  std::printf("file:          %s (%s, %s in %zu file%s)\n", l.path.c_str(), l.container.c_str(),
              human_bytes(l.file_bytes).c_str(), l.files.size(), l.files.size() == 1 ? "" : "s");
  std::printf("architecture:  %s\n", l.architecture.c_str());
  std::printf("tensors:       %zu\n", l.tensors.size());
  uint64_t params = 0;
  for (const auto& [k, s] : hist) params += s.elements;
  std::printf("elements:      %llu (%.3f B)\n", (unsigned long long)params, double(params) / 1e9);
  std::printf("dtypes:\n");
  for (const auto& [k, s] : hist)
    std::printf("  %-10s %8llu tensors %12s  %6.3f bits/element\n", k.c_str(), (unsigned long long)s.count,
                human_bytes(s.bytes).c_str(), s.elements ? 8.0 * double(s.bytes) / double(s.elements) : 0.0);
  std::printf("config:\n");
  for (const auto& [k, v] : l.config.items()) {
    std::string val = v.dump();
    if (val.size() > 100) val = val.substr(0, 97) + "...";
    std::printf("  %-32s %s\n", k.c_str(), val.c_str());
  }
  if (!v41.is_null()) {
    std::printf("DeepSeek-V4.1:\n");
    if (v41.contains("error")) {
      std::printf("  config not usable: %s\n", v41["error"].get<std::string>().c_str());
    } else {
      std::printf("  text config      %s (vision config %s)\n", v41["text_config"].get<std::string>().c_str(),
                  v41["vision_config"].get<bool>() ? "present" : "absent");
      std::printf("  layers           %u: %s\n", v41["layers"].get<unsigned>(), v41["layer_modes"].get<std::string>().c_str());
      std::printf("  KV / index srcs  %s / %s, candidate pool from layer %d, Engram %s\n", v41["kv_sources"].dump().c_str(),
                  v41["index_sources"].dump().c_str(), v41["candidate_source"].get<int>(), v41["engram_layers"].dump().c_str());
      std::printf("  this build runs:\n");
      for (const auto& [k, v] : v41["runs"].items()) std::printf("    %-72s %s\n", k.c_str(), v.get<bool>() ? "yes" : "no");
    }
  }
  if (a.state && state_json.contains("global_kv_bytes")) {
    const auto u = [&](const char* k) { return (unsigned long long)state_json[k].get<uint64_t>(); };
    std::printf("state at ctx %llu (V4.1 cache format: packed FP4 KV rows, FP8 window rings):\n", u("ctx"));
    std::printf("  compressed KV (FP4 + E4M3/16)   %llu bytes\n", u("main_kv_bytes"));
    std::printf("  index keys (FP4 + UE8M0/32)     %llu bytes\n", u("index_k_bytes"));
    std::printf("  global KV                       %llu bytes (%.1f bytes per token; KV sources at ratios %s)\n",
                u("global_kv_bytes"), state_json["global_kv_bytes_per_token"].get<double>(),
                state_json["kv_source_ratios"].dump().c_str());
    std::printf("  window rings (FP8 + UE8M0/32)   %llu bytes (%llu rings x %llu rows)\n", u("window_bytes"),
                u("window_rings"), u("window_rows"));
    std::printf("  compressor pending groups       %llu bytes\n", u("compressor_bytes"));
    std::printf("  Engram look-back ids            %llu bytes\n", u("engram_bytes"));
    std::printf("  total                           %llu bytes (%.1f bytes per token)\n", u("total_bytes"),
                state_json["bytes_per_token"].get<double>());
    std::printf("  (the CPU graph keeps the window rings in f32 with a rollback margin: %s)\n",
                human_bytes(state_json["cpu_f32_window_ring_bytes"].get<uint64_t>()).c_str());
  } else if (a.state) {
    std::printf("state at ctx %llu (f32, this implementation):\n", (unsigned long long)a.ctx);
    std::printf("  window KV rings          %s\n", human_bytes(state_json["ring_bytes"].get<uint64_t>()).c_str());
    std::printf("  compressor windows       %s\n", human_bytes(state_json["compressor_window_bytes"].get<uint64_t>()).c_str());
    std::printf("  compressed KV entries    %s\n", human_bytes(state_json["kv_entry_bytes"].get<uint64_t>()).c_str());
    std::printf("  indexer keys             %s\n", human_bytes(state_json["index_entry_bytes"].get<uint64_t>()).c_str());
    std::printf("  total                    %s (%.1f bytes per token)\n",
                human_bytes(state_json["total_bytes"].get<uint64_t>()).c_str(), state_json["bytes_per_token"].get<double>());
  }
  if (a.list_tensors) {
    std::printf("tensor list:\n");
    for (const auto& t : l.tensors)
      std::printf("  %-64s %-9s %-22s %s\n", t.name.c_str(), t.dtype.c_str(), shape_string(t.shape).c_str(),
                  human_bytes(t.bytes).c_str());
  }
  return 0;
}

}  // namespace cmfx::driver
