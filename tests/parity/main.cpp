// cmfx-parity: every GPU kernel against the CPU float64 reference, on fresh random inputs (docs/VULKAN.md).
// usage: cmfx-parity [--device N] [--seed S] [--filter A|B|…] [--cache-dir D] [--shader-dir D] [--validation]
//                    [--force-staging] [--host-import] [--transfer-queue] [--f64] …
//                    [--no-subgroup-ops] [--no-small-storage] [--f64] [--no-shuffle] [--force-staging]
//                    [--no-spirv-opt] [--nontemporal] [--list-devices]
// --transfer-queue: device_options::transfer_queue (transfers of begin_transfer() on a transfer-only family).
// Exit: 0 all pass; 1 a failure; 77 no Vulkan device (skipped) unless CI=true, then 1.
#include <cstdlib>
#include <iostream>
#include <random>

#include "harness.hpp"

namespace cmfx::parity {

bool suite::selected(const std::string& full) const {
  if (opt.filter.empty()) return true;
  for (size_t b = 0; b <= opt.filter.size();) {  // substrings separated by '|': any of them
    const size_t e = std::min(opt.filter.find('|', b), opt.filter.size());
    if (e > b && full.find(opt.filter.substr(b, e - b)) != std::string::npos) return true;
    b = e + 1;
  }
  return false;
}

void suite::run(const std::string& op, const std::string& fmt, const std::string& name,
                const std::function<std::string(uint64_t, std::string&)>& body) {
  const std::string full = op + "/" + fmt + "/" + name;
  if (!selected(full)) return;
  const uint64_t seed = case_seed(full);
  std::string info, why;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    why = body(seed, info);
  } catch (const std::exception& e) {
    why = std::string("exception: ") + e.what();
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  results_.push_back({op, fmt, name, why.empty() ? status::pass : status::fail});
  std::printf("[%s] %-44s %s (%.0f ms)%s%s\n", why.empty() ? "  ok  " : " FAIL ", full.c_str(), info.c_str(), ms,
              why.empty() ? "" : "\n         ", why.empty() ? "" : (why + "  [case seed " + std::to_string(seed) + "]").c_str());
  std::fflush(stdout);
}

double suite::submit(gpu::commands& c) {
  const auto t0 = std::chrono::steady_clock::now();
  dev.submit(c);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string verdict(const stats& s, double nmse_max, std::string& info, double max_abs_rel) {
  char b[128];
  std::snprintf(b, sizeof b, "nmse %.2e max_abs %.2e (ref max %.3g)", s.nmse, s.max_abs, s.ref_max);
  info = b;
  if (s.nonfinite_mismatch) return std::to_string(s.nonfinite_mismatch) + " NaN/Inf positions differ (or poison left)";
  if (!(s.nmse <= nmse_max)) {
    std::snprintf(b, sizeof b, "nmse %.3e > bound %.1e", s.nmse, nmse_max);
    return b;
  }
  if (!(s.max_abs <= max_abs_rel * std::max(1.0, s.ref_max))) {
    std::snprintf(b, sizeof b, "max_abs %.3e > %.0e x max(1, ref max)", s.max_abs, max_abs_rel);
    return b;
  }
  return {};
}

int suite::failures() const {
  int f = 0;
  for (const auto& r : results_) f += r.st == status::fail;
  return f;
}

int suite::report() const {
  // cell = fail if any case failed, else pass if any passed, else unsupported / not run
  std::vector<std::string> ops, fmts;
  std::map<std::pair<std::string, std::string>, status> cell;
  std::map<std::pair<std::string, std::string>, int> count;
  auto add_unique = [](std::vector<std::string>& v, const std::string& x) {
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  };
  for_each_type(all_formats{}, [&]<class F>() { fmts.emplace_back(F::name); });
  fmts.emplace_back("-");
  for (const auto& r : results_) {
    add_unique(ops, r.op);
    const auto key = std::make_pair(r.op, r.fmt);
    auto it = cell.find(key);
    if (it == cell.end())
      cell[key] = r.st;
    else if (r.st == status::fail)
      it->second = status::fail;
    else if (r.st == status::pass && it->second == status::unsupported)
      it->second = status::pass;
    if (r.st != status::unsupported) ++count[key];
  }
  std::printf("\ncoverage (cases per cell; '-' = format-independent op):\n%-14s", "op");
  for (const auto& f : fmts) std::printf(" %-9s", f.c_str());
  std::printf("\n");
  int missing = 0;
  for (const auto& op : ops) {
    std::printf("%-14s", op.c_str());
    const bool per_format = cell.count({op, "-"}) == 0;
    for (const auto& f : fmts) {
      const auto it = cell.find({op, f});
      std::string t = "";
      if (it == cell.end()) {
        if (per_format && f != "-" && opt.filter.empty()) {
          t = "MISSING";
          ++missing;
        }
      } else if (it->second == status::unsupported) {
        t = "unsupp.";
      } else {
        t = std::string(it->second == status::pass ? "pass" : "FAIL") + "(" + std::to_string(count.at({op, f})) + ")";
      }
      std::printf(" %-9s", t.c_str());
    }
    std::printf("\n");
  }
  int pass = 0, fail = 0;
  for (const auto& r : results_) pass += r.st == status::pass, fail += r.st == status::fail;
  std::printf("\n%d cases passed, %d failed%s\n", pass, fail,
              missing ? (", " + std::to_string(missing) + " (op, format) pairs without a case").c_str() : "");
  return fail + missing;
}

}  // namespace cmfx::parity

namespace {

int no_device(const std::string& why) {
  const char* ci = std::getenv("CI");
  const char* icd = std::getenv("VK_ICD_FILENAMES");
  std::fprintf(stderr,
               "\n**********************************************************************\n"
               "*** cmfx-parity: NO USABLE VULKAN DEVICE — the GPU parity suite did not run\n"
               "*** %s\n"
               "*** VK_ICD_FILENAMES=%s (lavapipe: Debian package mesa-vulkan-drivers)\n"
               "**********************************************************************\n\n",
               why.c_str(), icd ? icd : "(unset)");
  return ci && std::string(ci) == "true" ? 1 : 77;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cmfx;
  gpu::device_options dopt;
  parity::options popt;
  popt.seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--device") dopt.index = std::stoi(next());
    else if (a == "--seed") popt.seed = std::stoull(next());
    else if (a == "--filter") popt.filter = next();
    else if (a == "--cache-dir") dopt.cache_dir = next();
    else if (a == "--shader-dir") dopt.shader_dir = next();
    else if (a == "--validation") dopt.validation = true;
    else if (a == "--no-subgroup-ops") dopt.allow_subgroup_ops = false;
    else if (a == "--no-small-storage") dopt.allow_small_storage = false;
    else if (a == "--f64") dopt.float64 = true;
    else if (a == "--no-shuffle") dopt.allow_shuffle = false;
    else if (a == "--force-staging") dopt.force_staging = true;
    else if (a == "--host-import") dopt.allow_host_import = true;
    else if (a == "--transfer-queue") dopt.transfer_queue = true;
    else if (a == "--no-spirv-opt") dopt.optimize_spirv = false;
    else if (a == "--nontemporal") dopt.nontemporal_weights = true;
    else if (a == "--list-devices") list = true;
    else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of tests/parity/main.cpp)\n", a.c_str());
      return 2;
    }
  }
  std::unique_ptr<gpu::device> dev;
  try {
    if (list) {
      for (const auto& d : gpu::list_devices()) std::printf("%s\n", d.describe().c_str());
      return 0;
    }
    dev = std::make_unique<gpu::device>(dopt);
  } catch (const gpu::gpu_error& e) {
    if (dopt.index >= 0) {  // an explicit device that cannot be used is an error, not a skip
      std::fprintf(stderr, "cmfx-parity: --device %d: %s\n", dopt.index, e.what());
      return 1;
    }
    return no_device(e.what());
  }
  try {
    int bad = 0;
    {  // the kernels and the suite's buffers are gone before the validation count is read (their teardown counts)
      gpu::kernels kern(*dev);
      if (!dev->info().coop_shapes.empty())
        std::printf("cooperative-matrix shapes: %s\n", dev->info().coop_shapes.c_str());
      std::printf("cmfx-parity: %s\nvariants: %s\nseed %llu (rerun with --seed %llu; a case keeps its inputs under any --filter)\n\n", dev->info().describe().c_str(),
                  kern.describe().c_str(), (unsigned long long)popt.seed, (unsigned long long)popt.seed);
      parity::suite s(*dev, kern, popt);
      const auto t0 = std::chrono::steady_clock::now();
      parity::matrix_cases(s);
      parity::op_cases(s);
      parity::route_cases(s);
      parity::mhc_cases(s);
      parity::quant_cases(s);
      parity::moe_cases(s);
      parity::moe_slots_cases(s);
      parity::attn_cases(s);
      parity::attn_q8_cases(s);
      parity::model_cases(s);
      parity::model_v41_cases(s);
      parity::prompt_cache_cases(s);
      parity::chunk_pipeline_cases(s);
      parity::chunk_passes_cases(s);
      parity::prim_cases(s);
      parity::queue_cases(s);
      parity::v41_cases(s);
      parity::sample_cases(s);
      bad = s.report();
      const gpu::pipeline_stats ps = kern.stats();
      // (SPIR-V read from the disk cache was marked when compiled and is not counted again)
      if (dopt.nontemporal_weights && ps.compiled > 0 && ps.spirv_disk_hits == 0 && ps.nontemporal_loads == 0) {
        std::printf("FAIL: --nontemporal marked no load in %u compiled shaders\n", ps.compiled);
        bad = 1;
      }
      std::printf("%u pipelines (%u GLSL compiles in %.2f s, %u SPIR-V cache hits, %llu loads marked nontemporal); "
                  "total %.1f s\n",
                  ps.pipelines, ps.compiled, ps.compile_seconds, ps.spirv_disk_hits,
                  (unsigned long long)ps.nontemporal_loads,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (dopt.validation && dev->validation_errors() > 0) {
      std::printf("FAIL: the validation layer reported %llu error(s) (on stderr)\n",
                  (unsigned long long)dev->validation_errors());
      bad = 1;
    }
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx-parity: %s\n", e.what());
    return 1;
  }
}
