#pragma once
// How many leading positions of a sequence state a new prompt may reuse (the prompt cache of `cmfx run`, the serve
// scheduler's prefix reuse). The official code prefills every prompt from position 0 in one call (spec §5.1), so a
// reused prefix must hold what that prefill would have made of it. Under V4.1's official stale index-key rule
// (dsv41_options::stale_index_k) decode steps score other keys than prefill rows, so only a state's prefill
// positions (below dsv41_state::prefill_end) are reusable: positions after them — the previous reply, generated as
// decode steps — run again as part of the new prompt's prefill. Any prefix otherwise (V4; V4.1 with the rule off).
#include <cstdint>

#include "prefill_mark.hpp"

namespace cmfx::driver {

/// The reusable leading positions of `st` (a state of model `m`): its prefill end where the rule applies, else
/// no_reuse_limit.
template <class Model, class State>
uint64_t reuse_limit(const Model& m, const State& st) {
  if constexpr (requires { st.prefill_end(); m.options().stale_index_k; })
    return m.options().stale_index_k ? st.prefill_end() : no_reuse_limit;
  else
    return no_reuse_limit;
}

}  // namespace cmfx::driver
