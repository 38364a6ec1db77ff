#pragma once
// The weight bytes one decode step of a CPU graph reads, counted as the GPU graphs count theirs (their
// bytes_per_token): every dense matrix a token multiplies (attention, compressor, indexer and Engram projections,
// the router gate, the head), top_k routed experts and the shared expert per layer. Not counted: norms, biases
// and the other small f32 vectors, and the rows gathered from the embedding and Engram tables.
#include <cstdint>

#include "dsv41_weights.hpp"
#include "dsv4_weights.hpp"

namespace cmfx::driver {

/// The count split as the CPU profile's phases split the time (cpu_profile.hpp): `dense` every projection a
/// `linear` or wo_a's grouped product reads (Engram's wkv too), `router` the gate, `experts` top_k routed + shared.
struct token_bytes {
  uint64_t dense = 0, router = 0, experts = 0, head = 0;
  uint64_t total() const noexcept { return dense + router + experts + head; }
};

token_bytes dsv4_token_bytes(const dsv4_weights& w);
token_bytes dsv41_token_bytes(const dsv41_weights& w);

}  // namespace cmfx::driver
