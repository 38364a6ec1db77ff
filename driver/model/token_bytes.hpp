#pragma once
// The weight bytes one decode step of a CPU graph reads, counted as the GPU graphs count theirs (their
// bytes_per_token): every dense matrix a token multiplies (attention, compressor, indexer and Engram projections,
// the router gate, the head), top_k routed experts and the shared expert per layer. Not counted: norms, biases
// and the other small f32 vectors, and the rows gathered from the embedding and Engram tables.
#include <cstdint>

#include "dsv41_weights.hpp"
#include "dsv4_weights.hpp"

namespace cmfx::driver {

uint64_t dsv4_token_bytes(const dsv4_weights& w);
uint64_t dsv41_token_bytes(const dsv41_weights& w);

}  // namespace cmfx::driver
