// `cmfx verify FILE`: every stored hash of a CMF file, multi-threaded, with progress and throughput.
// Exit codes (an interface other tools rely on): 0 all hashes match, 1 some tensor or section is corrupt (each
// named on stderr), 2 the file cannot be read as CMF at all.
#include <chrono>
#include <cstdio>
#include <thread>

#include "cmfx/io/cmf_reader.hpp"
#include "cmfx/io/cmf_verify.hpp"
#include "commands.hpp"
#include "progress.hpp"

namespace cmfx::driver {

int run_verify(const verify_args& a) {
  std::optional<cmf_file> f;
  try {
    f.emplace(cmf_file::open(a.path));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cmfx verify: %s\n", e.what());
    return 2;
  }
  if (const mapped_file* m = f->mapping(); m && f->envelope().data.present())
    m->advise_sequential(f->envelope().data.off, f->envelope().data.len);
  verify_options o;
  o.threads = a.threads ? a.threads : std::max(1u, std::thread::hardware_concurrency());
  progress_bar bar("verify");
  const auto t0 = std::chrono::steady_clock::now();
  if (!a.quiet)
    o.progress = [&](uint64_t done, uint64_t total) {
      bar.update(done, total, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
  const verify_report rep = verify(*f, o);
  if (!a.quiet) bar.finish();
  for (const auto& p : rep.problems) std::fprintf(stderr, "cmfx verify: %s: %s\n", a.path.c_str(), p.c_str());
  std::printf("%s: %zu tensors, %s hashed in %.3f s (%.2f GB/s, %u threads): %s\n", a.path.c_str(), f->tensors().size(),
              human_bytes(rep.bytes_hashed).c_str(), rep.seconds,
              rep.seconds > 0 ? double(rep.bytes_hashed) / rep.seconds / 1e9 : 0.0, o.threads,
              rep.ok() ? "OK" : "CORRUPT");
  return rep.ok() ? 0 : 1;
}

}  // namespace cmfx::driver
