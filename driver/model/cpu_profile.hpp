#pragma once
// Where a CPU forward pass spends its time (`cmfx bench --backend cpu --profile`): wall time per phase, summed over
// the forward calls made while a profile is attached to the model (dsv4_model / dsv41_model::set_profile).
//
// Phases nest (a dense product inside the attention sublayer); each phase is charged its exclusive time — its
// elapsed time minus that of the phases opened inside it — so the phases add up to the time spent inside them, and
// `attention` is what the sublayer does beside its products (norms, rope, the compressor's state machine, the
// indexer's scores and top-k, the sparse softmax). The clock is injectable for tests.
#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace cmfx::driver {

enum class cpu_phase : uint8_t {
  embed,      // embedding rows → the hc copies
  mhc,        // hc_pre + RMSNorm before each sublayer, hc_post after it
  attention,  // the attention sublayer beside its products
  dense,      // every dense product: the attention's projections (wo_a's groups too), the compressors', the
              // indexer's, Engram's wkv
  router,     // the router's scores and the routing (score or hash)
  experts,    // routed + shared experts (moe_forward)
  engram,     // V4.1's Engram lookups and projections
  head,       // hc_head, the final norm and the vocabulary head
  count
};

constexpr std::array<std::string_view, size_t(cpu_phase::count)> cpu_phase_names = {
    "embed", "mhc", "attention", "dense", "router", "experts", "engram", "head"};

struct cpu_profile {
  using clock_fn = double (*)();  // seconds, monotonic
  static double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  std::array<double, size_t(cpu_phase::count)> seconds{};  // exclusive time per phase
  std::array<uint64_t, size_t(cpu_phase::count)> calls{};  // scopes closed per phase
  clock_fn now = &steady_seconds;
  double* open_children = nullptr;  // the innermost open scope's children time (nullptr: none open)

  void reset() {
    seconds.fill(0);
    calls.fill(0);
  }
  double total() const {
    double t = 0;
    for (double s : seconds) t += s;
    return t;
  }
};

/// Charges the time between construction and destruction to `phase` of `p` (exclusive of nested scopes); a null
/// profile makes it a no-op. Scopes must nest (one thread: the forward pass's calling thread).
class cpu_phase_scope {
 public:
  cpu_phase_scope(cpu_profile* p, cpu_phase phase) : p_(p), phase_(phase) {
    if (!p_) return;
    parent_ = p_->open_children;
    p_->open_children = &children_;
    t0_ = p_->now();
  }
  ~cpu_phase_scope() {
    if (!p_) return;
    const double el = p_->now() - t0_;
    p_->seconds[size_t(phase_)] += el - children_;
    ++p_->calls[size_t(phase_)];
    p_->open_children = parent_;
    if (parent_) *parent_ += el;
  }
  cpu_phase_scope(const cpu_phase_scope&) = delete;
  cpu_phase_scope& operator=(const cpu_phase_scope&) = delete;

 private:
  cpu_profile* p_;
  cpu_phase phase_;
  double* parent_ = nullptr;
  double children_ = 0, t0_ = 0;
};

}  // namespace cmfx::driver
