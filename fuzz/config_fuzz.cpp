// libFuzzer target for the model hyper-parameter readers (driver/model/dsv4_config.cpp, dsv41_config.cpp): any JSON
// — a release config.json or a CMF header — either yields a config of each kind it claims to be or raises
// usage_error / input_error naming the problem; any other exception, a crash or a runaway allocation is a finding.
// Seeds: the toys' config.json and CMF headers (fuzz/seeds/config).
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cmfx/core/error.hpp"
#include "model/dsv41_config.hpp"
#include "model/dsv4_config.hpp"

namespace {

template <class F>
void guarded(F&& f) {
  try {
    f();
  } catch (const cmfx::usage_error&) {
  } catch (const cmfx::input_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cmfx::driver;
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  volatile size_t sink = 0;
  guarded([&] { sink = sink + dsv4_config_from_release(j).layers; });
  guarded([&] { sink = sink + dsv4_config_from_cmf(j).layers; });
  guarded([&] {
    if (dsv41_is_release_config(j)) sink = sink + dsv41_config_from_release(j).layers;
  });
  guarded([&] {
    if (dsv41_is_cmf_header(j)) sink = sink + dsv41_config_from_cmf(j).layers;
  });
  return 0;
}
