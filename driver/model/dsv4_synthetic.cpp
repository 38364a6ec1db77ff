#include "dsv4_synthetic.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/core/hash64.hpp"
#include "cmfx/formats/format_list.hpp"
#include "toy_v4.hpp"

namespace cmfx::driver {

namespace {

// ---- deterministic random rows -----------------------------------------------------------------------------------

/// splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014): a 64-bit
/// counter passed through a mixing function; one independent stream per matrix row.
struct row_rng {
  uint64_t s;
  uint64_t next() noexcept {
    uint64_t z = (s += hash64_golden);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

uint64_t stream_base(uint64_t seed, std::string_view key) {
  return fmix64(seed ^ fmix64(hash64(reinterpret_cast<const uint8_t*>(key.data()), key.size())));
}
row_rng row_stream(uint64_t base, uint64_t row) { return row_rng{fmix64(base + (row + 1) * hash64_golden)}; }

/// mean + sd·N(0, 1) for one row: Marsaglia's polar method in f32 (one log and one sqrt per pair of normals; a
/// pair of uniforms in the square is kept when it falls inside the unit disc, π/4 of the time). One 64-bit draw
/// gives both 32-bit coordinates.
void fill_row(float* out, uint64_t cols, row_rng rng, float mean, float sd) {
  for (uint64_t c = 0; c < cols; c += 2) {
    float u, v, s;
    do {
      const uint64_t x = rng.next();
      u = float(int32_t(uint32_t(x))) * 0x1p-31f;  // [-1, 1)
      v = float(int32_t(uint32_t(x >> 32))) * 0x1p-31f;
      s = u * u + v * v;
    } while (s >= 1.0f || s == 0.0f);
    const float m = std::sqrt(-2.0f * std::log(s) / s);
    out[c] = mean + sd * (u * m);
    if (c + 1 < cols) out[c + 1] = mean + sd * (v * m);
  }
}

// ---- threads -----------------------------------------------------------------------------------------------------

/// Threads parallel_for uses for n items (0 = hardware concurrency).
uint64_t workers_for(uint64_t n, unsigned threads) {
  const uint64_t t = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  return std::max<uint64_t>(1, std::min(t, n));
}

/// fn(i, worker) for every i in [0, n), items handed out dynamically to workers_for(n, threads) threads (worker in
/// [0, that)); the first exception is rethrown after every thread has stopped.
template <class Fn>
void parallel_for(uint64_t n, unsigned threads, Fn&& fn) {
  const uint64_t t = workers_for(n, threads);
  if (t <= 1) {
    for (uint64_t i = 0; i < n; ++i) fn(i, uint64_t(0));
    return;
  }
  std::atomic<uint64_t> next{0};
  std::exception_ptr err;
  std::mutex m;
  auto work = [&](uint64_t worker) {
    for (;;) {
      const uint64_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        fn(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lk(m);
        if (!err) err = std::current_exception();
        next.store(n);
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint64_t k = 1; k < t; ++k) pool.emplace_back(work, k);
  work(0);
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

// ---- row-chunked encoding ----------------------------------------------------------------------------------------

/// How a format's payload splits by rows: `bytes[p]` bytes of plane p per row (planes stored one after another,
/// each row-major), external scales `scale_block` bytes per `align` rows. Chunks must start on multiples of `align`.
struct row_planes {
  std::vector<uint64_t> bytes;
  uint64_t align = 1, scale_block = 0;
};

/// The plane structure of F (from the layouts documented in its header), or nullopt where the payload does not
/// split by rows: q8_2f (column scales over the whole matrix), q4_block / q4t (groups over the flattened tensor).
template <class F>
std::optional<row_planes> row_layout(uint64_t cols) {
  row_planes p;
  if constexpr (F::id == format::q4tp || F::id == format::q2tp) {
    const uint64_t gpr = cols / ladder::group_elems;
    p.bytes = {gpr * F::value_bytes, ladder::param_bytes, ladder::code_stride(gpr)};
  } else if constexpr (F::id == format::q8_row) {
    p.bytes = {F::data_bytes(1, cols) - F::row_scale_bytes, F::row_scale_bytes};
  } else if constexpr (F::id == format::f32 || F::id == format::f16 || F::id == format::bf16 ||
                       F::id == format::mxfp4 || F::id == format::fp8_b128 || F::id == format::fp8_b32) {
    p.bytes = {F::data_bytes(1, cols)};
    p.align = F::block_rows;
    p.scale_block = F::scale_bytes(F::block_rows, cols);
  } else {
    return std::nullopt;
  }
  return p;
}

/// Whether the plane description reproduces F's sizes for [rows, cols] (a guard against a layout change).
template <class F>
bool layout_matches(const row_planes& p, uint64_t rows, uint64_t cols) {
  uint64_t per_row = 0;
  for (uint64_t b : p.bytes) per_row += b;
  return per_row * rows == F::data_bytes(rows, cols) &&
         ceil_div(rows, p.align) * p.scale_block == F::scale_bytes(rows, cols);
}

template <class F>
encoded_matrix encode_whole(uint64_t rows, uint64_t cols, uint64_t base, float sd, unsigned threads) {
  std::vector<float> w(rows * cols);
  parallel_for(rows, threads, [&](uint64_t r, uint64_t) { fill_row(w.data() + r * cols, cols, row_stream(base, r), 0.0f, sd); });
  return F::encode(w.data(), rows, cols);
}

template <class F>
encoded_matrix encode_chunked(uint64_t rows, uint64_t cols, uint64_t base, float sd, unsigned threads,
                              uint64_t chunk_rows) {
  const std::optional<row_planes> lay = row_layout<F>(cols);
  if (!lay || !layout_matches<F>(*lay, rows, cols)) return encode_whole<F>(rows, cols, base, sd, threads);
  // Automatic: at most ~1M values (a few MB of f32 per thread) and at least 4 chunks per thread.
  constexpr uint64_t auto_values = uint64_t(1) << 20, chunks_per_thread = 4;
  const uint64_t spread = ceil_div(rows, chunks_per_thread * workers_for(rows, threads));
  uint64_t chunk = chunk_rows ? chunk_rows : std::max<uint64_t>(1, std::min(auto_values / cols, spread));
  chunk = ceil_div(chunk, lay->align) * lay->align;
  const uint64_t n_chunks = ceil_div(rows, chunk);
  if (n_chunks <= 1) return encode_whole<F>(rows, cols, base, sd, threads);

  encoded_matrix out;
  out.data.resize(F::data_bytes(rows, cols));
  out.scale.resize(F::scale_bytes(rows, cols));
  std::vector<uint64_t> plane_off(lay->bytes.size(), 0);
  for (size_t p = 1; p < plane_off.size(); ++p) plane_off[p] = plane_off[p - 1] + rows * lay->bytes[p - 1];
  std::vector<std::vector<float>> bufs(workers_for(n_chunks, threads));  // one f32 chunk per worker, reused
  parallel_for(n_chunks, threads, [&](uint64_t k, uint64_t worker) {
    const uint64_t r0 = k * chunk, n = std::min(chunk, rows - r0);
    std::vector<float>& w = bufs[worker];
    w.resize(n * cols);
    for (uint64_t r = 0; r < n; ++r) fill_row(w.data() + r * cols, cols, row_stream(base, r0 + r), 0.0f, sd);
    const encoded_matrix e = F::encode(w.data(), n, cols);
    uint64_t src = 0;
    for (size_t p = 0; p < lay->bytes.size(); ++p) {
      const uint64_t bytes = n * lay->bytes[p];
      if (src + bytes > e.data.size()) throw std::logic_error("dsv4_synth_matrix: chunk payload shorter than its planes");
      std::memcpy(out.data.data() + plane_off[p] + r0 * lay->bytes[p], e.data.data() + src, bytes);
      src += bytes;
    }
    const uint64_t sdst = (r0 / lay->align) * lay->scale_block;
    if (src != e.data.size() || sdst + e.scale.size() > out.scale.size())
      throw std::logic_error("dsv4_synth_matrix: chunk sizes disagree with the format's plane layout");
    if (!e.scale.empty()) std::memcpy(out.scale.data() + sdst, e.scale.data(), e.scale.size());
  });
  return out;
}

bool shape_fits(format f, uint64_t rows, uint64_t cols) {
  bool ok = false;
  visit_format(f, [&]<class F>() { ok = F::shape_ok(rows, cols); });
  return ok;
}

std::string shape_str(uint64_t rows, uint64_t cols) {
  std::string s = "[";
  s += std::to_string(rows);
  s += ", ";
  s += std::to_string(cols);
  s += "]";
  return s;
}

// ---- presets -----------------------------------------------------------------------------------------------------

constexpr uint32_t flash_layers = 43;     // dsv4-architecture.md §1 (V4-Flash-0731)
constexpr uint32_t flash_hash_layers = 3;
constexpr uint32_t tiny_vocab = 1024;

/// The compress-ratio pattern of §1: layers 0 and 1 sliding-window, then ratio 4 (CSA) on even and 128 (HCA) on odd
/// layers, through layer 42.
uint32_t pattern_ratio(uint32_t i) { return i < 2 ? 0u : (i % 2 == 0 ? 4u : 128u); }

dsv4_config flash_config() {
  dsv4_config c;
  c.vocab = 129280;
  c.dim = 4096;
  c.layers = flash_layers;
  c.heads = 64;
  c.head_dim = 512;
  c.q_lora = 1024;
  c.o_lora = 1024;
  c.experts = 256;
  c.top_k = 6;
  c.moe_inter = 2048;
  c.num_hash_layers = flash_hash_layers;
  c.compress_ratios.resize(flash_layers);
  for (uint32_t i = 0; i < flash_layers; ++i) c.compress_ratios[i] = pattern_ratio(i);
  return c;  // rope_dim, o_groups, index dims / top-k, window, hc, eps, rope/YaRN: the dsv4_config.hpp constants
}

dsv4_config tiny_config() {
  const toy_v4_config t;
  dsv4_config c;
  c.vocab = tiny_vocab;
  c.layers = t.num_layers();
  copy_toy_dims(c, t);
  c.num_hash_layers = t.num_hash_layers;
  c.compress_ratios = t.compress_ratios;
  return c;
}

// ---- the model ---------------------------------------------------------------------------------------------------

/// Everything the views point into.
struct synth_store {
  synth_seeds seeds;                      // the big matrices
  std::vector<std::vector<float>> gates;  // per-layer f32 router weights
  synth_store(const dsv4_synth_options& o, uint32_t variants) : seeds(o.seed, o.threads, variants, "", "synthetic model") {}
};

class synth_builder {
 public:
  synth_builder(const dsv4_synth_options& o, synth_store& st) : o_(o), st_(st) {}

  dsv4_matrix seed(const std::string& role, format f, uint64_t rows, uint64_t cols, uint64_t k, bool qat = false) {
    return st_.seeds.seed(role, f, rows, cols, k, qat);
  }
  expert_view expert(const std::string& role, format gate_up, format down, uint64_t inter, uint64_t dim, uint64_t k) {
    return st_.seeds.expert(role, gate_up, down, inter, dim, k);
  }

  /// Per-tensor values mean + sd·N(0, 1) of the named tensor [rows, cols] (row-major).
  std::vector<float> floats(const std::string& name, uint64_t rows, uint64_t cols, float mean, float sd) const {
    std::vector<float> v(rows * cols);
    const uint64_t base = stream_base(o_.seed, name);
    for (uint64_t r = 0; r < rows; ++r) fill_row(v.data() + r * cols, cols, row_stream(base, r), mean, sd);
    return v;
  }
  std::vector<float> vec(const std::string& name, uint64_t n, float mean, float sd) const {
    return floats(name, 1, n, mean, sd);
  }
  /// A matrix-shaped small tensor (hc_*_fn, ape): N(0, 1/cols).
  std::vector<float> mat(const std::string& name, uint64_t rows, uint64_t cols) const {
    return floats(name, rows, cols, 0.0f, 1.0f / std::sqrt(float(cols)));
  }

  /// tid2eid [vocab, top_k]: each token gets top_k distinct experts.
  std::vector<int32_t> tid2eid(const std::string& name, uint32_t vocab, uint32_t top_k, uint32_t experts) const {
    std::vector<int32_t> t(uint64_t(vocab) * top_k);
    const uint64_t base = stream_base(o_.seed, name);
    for (uint64_t r = 0; r < vocab; ++r) {
      row_rng rng = row_stream(base, r);
      int32_t* row = t.data() + r * top_k;
      for (uint32_t k = 0; k < top_k;) {
        const int32_t e = int32_t(rng.next() % experts);
        if (std::find(row, row + k, e) == row + k) row[k++] = e;
      }
    }
    return t;
  }

 private:
  const dsv4_synth_options& o_;
  synth_store& st_;
};

dsv4_compressor_w compressor(synth_builder& b, const std::string& role, uint32_t ratio, uint32_t width, uint32_t dim,
                             format f, uint32_t layer) {
  dsv4_compressor_w c;
  c.ratio = ratio;
  c.width = width;
  c.overlap = ratio == 4;
  const uint64_t rows = uint64_t(c.coff()) * width;
  c.wkv = b.seed(role + "wkv", f, rows, dim, layer);
  c.wgate = b.seed(role + "wgate", f, rows, dim, layer);
  const std::string p = "layers." + std::to_string(layer) + "." + role;
  c.ape = b.mat(p + "ape", ratio, rows);
  c.norm = b.vec(p + "norm.weight", width, 1.0f, 0.1f);
  return c;
}

}  // namespace

std::string dsv4_synth_preset(std::string_view name) {
  if (name == "v4-flash" || name == "tiny") return std::string(name);
  std::string m = "unknown synthetic model preset '";
  m += name;
  m += "' (known: v4-flash, tiny)";
  throw usage_error(m);
}

format dsv4_synth_format(std::string_view name) {
  std::optional<format> hit;
  std::string known;
  for_each_type(all_formats{}, [&]<class F>() {
    if (F::name == name) hit = F::id;
    if (!known.empty()) known += ", ";
    known += F::name;
  });
  if (hit) return *hit;
  std::string m = "unknown weight format '";
  m += name;
  m += "' (known: ";
  m += known;
  m += ")";
  throw usage_error(m);
}

encoded_matrix dsv4_synth_matrix(format f, uint64_t rows, uint64_t cols, uint64_t seed, std::string_view key, float sd,
                                 unsigned threads, uint64_t chunk_rows) {
  if (!shape_fits(f, rows, cols)) {
    std::string m = "synthetic matrix '";
    m += key;
    m += "': format ";
    m += format_name(f);
    m += " cannot hold ";
    m += shape_str(rows, cols);
    throw usage_error(m);
  }
  const uint64_t base = stream_base(seed, key);
  encoded_matrix out;
  visit_format(f, [&]<class F>() { out = encode_chunked<F>(rows, cols, base, sd, threads, chunk_rows); });
  return out;
}

void dsv4_synth_rows(float* out, uint64_t row0, uint64_t n, uint64_t cols, uint64_t seed, std::string_view key,
                     float mean, float sd) {
  const uint64_t base = stream_base(seed, key);
  for (uint64_t r = 0; r < n; ++r) fill_row(out + r * cols, cols, row_stream(base, row0 + r), mean, sd);
}

synth_seeds::synth_seeds(uint64_t seed, unsigned threads, uint32_t variants, std::string prefix, std::string what)
    : seed_(seed), threads_(threads), variants_(std::max(variants, 1u)), prefix_(std::move(prefix)), what_(std::move(what)) {}

dsv4_matrix synth_seeds::seed(const std::string& role, format f, uint64_t rows, uint64_t cols, uint64_t k, bool qat) {
  if (!shape_fits(f, rows, cols)) {
    std::string m = what_;
    m += ": format ";
    m += format_name(f);
    m += " cannot hold ";
    m += role;
    m += " ";
    m += shape_str(rows, cols);
    throw usage_error(m);
  }
  std::string key = prefix_;
  key += role;
  key += shape_str(rows, cols);
  key += "#";
  key += std::to_string(k % variants_);
  std::string slot = key;
  slot += "/";
  slot += format_name(f);
  std::unique_ptr<encoded_matrix>& e = seeds_[slot];
  if (!e)
    e = std::make_unique<encoded_matrix>(
        dsv4_synth_matrix(f, rows, cols, seed_, key, 1.0f / std::sqrt(float(cols)), threads_));
  dsv4_matrix m;
  m.fmt = f;
  m.qat_input = qat;
  m.v = matrix_view{e->data.data(), e->data.size(), e->scale.empty() ? nullptr : e->scale.data(), e->scale.size(),
                    e->scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
  return m;
}

expert_view synth_seeds::expert(const std::string& role, format gate_up, format down, uint64_t inter, uint64_t dim,
                                uint64_t k) {
  const dsv4_matrix g = seed(role + ".w1", gate_up, inter, dim, k, true), u = seed(role + ".w3", gate_up, inter, dim, k, true),
                    d = seed(role + ".w2", down, dim, inter, k, true);
  return expert_view{g.v, u.v, d.v, g.fmt, u.fmt, d.fmt};
}

void dsv4_synth_parallel_for(uint64_t n, unsigned threads, const std::function<void(uint64_t, uint64_t)>& fn) {
  parallel_for(n, threads, fn);
}

uint64_t dsv4_synth_workers(uint64_t n, unsigned threads) { return workers_for(n, threads); }

dsv4_config dsv4_synth_config(const dsv4_synth_options& o) {
  const std::string preset = dsv4_synth_preset(o.preset);
  dsv4_config c = preset == "tiny" ? tiny_config() : flash_config();
  if (o.layers) c.layers = o.layers;
  if (o.vocab) c.vocab = o.vocab;
  std::vector<uint32_t> ratios(c.layers);
  for (uint32_t i = 0; i < c.layers; ++i) ratios[i] = i < c.compress_ratios.size() ? c.compress_ratios[i] : pattern_ratio(i);
  c.compress_ratios = ratios;
  c.num_hash_layers = std::min(c.num_hash_layers, c.layers);
  c.kinds.assign(c.layers, {});
  for (uint32_t i = 0; i < c.layers; ++i) {
    c.kinds[i].ratio = c.compress_ratios[i];
    c.kinds[i].indexer = c.compress_ratios[i] == 4;
    c.kinds[i].hash = i < c.num_hash_layers;
  }
  return c;
}

dsv4_weights dsv4_synthetic(const dsv4_synth_options& o) {
  const dsv4_config c = dsv4_synth_config(o);
  for (format f : {o.experts, o.dense, o.embed, o.expert_down.value_or(o.experts)})
    if (!visit_format(f, []<class>() {})) throw usage_error("synthetic model: invalid weight format value");
  const uint32_t variants = o.variants ? o.variants
                            : o.preset == "tiny" ? std::numeric_limits<uint32_t>::max()
                                                 : 1u;
  auto store = std::make_shared<synth_store>(o, variants);
  synth_builder b(o, *store);
  const uint64_t d = c.dim, H = c.heads, hd = c.head_dim, q = c.q_lora, G = c.o_groups, ol = c.o_lora;
  const uint64_t E = c.experts, I = c.moe_inter, hcd = uint64_t(2 + c.hc) * c.hc;
  const format dn = o.dense, down = o.expert_down.value_or(o.experts);

  dsv4_weights w;
  w.cfg = c;
  w.source = "synthetic";
  w.embed = b.seed("embed", o.embed, c.vocab, d, 0);
  w.head = b.seed("head", dn, c.vocab, d, 0);
  w.norm = b.vec("norm.weight", d, 1.0f, 0.1f);
  w.hc_head_fn = b.mat("hc_head_fn", c.hc, c.hc * d);
  w.hc_head_base = b.vec("hc_head_base", c.hc, 0.0f, 0.1f);
  w.hc_head_scale = b.vec("hc_head_scale", 1, 0.5f, 0.05f)[0];

  // Shared seeds first (serially: each is encoded on all threads), then the per-layer small tensors in parallel.
  w.layers.resize(c.layers);
  for (uint32_t i = 0; i < c.layers; ++i) {
    dsv4_layer_w& L = w.layers[i];
    const dsv4_layer_kind k = c.kinds[i];
    L.kind = k;
    L.wq_a = b.seed("attn.wq_a", dn, q, d, i, true);
    L.wq_b = b.seed("attn.wq_b", dn, H * hd, q, i, true);
    L.wkv = b.seed("attn.wkv", dn, hd, d, i, true);
    L.wo_a = b.seed("attn.wo_a", dn, G * ol, H * hd / G, i);
    L.wo_b = b.seed("attn.wo_b", dn, d, G * ol, i, true);
    if (k.ratio > 0) L.comp = compressor(b, "attn.compressor.", k.ratio, c.head_dim, c.dim, dn, i);
    if (k.indexer) {
      L.ix_wq_b = b.seed("attn.indexer.wq_b", dn, uint64_t(c.index_heads) * c.index_head_dim, q, i, true);
      L.ix_weights_proj = b.seed("attn.indexer.weights_proj", dn, c.index_heads, d, i);
      L.ix_comp = compressor(b, "attn.indexer.compressor.", 4, c.index_head_dim, c.dim, dn, i);
    }
    L.experts.resize(E);
    for (uint64_t e = 0; e < E; ++e) L.experts[e] = b.expert("ffn.experts", o.experts, down, I, d, i * E + e);
    L.shared = b.expert("ffn.shared_experts", o.shared_routed ? o.experts : dn, o.shared_routed ? down : dn, I, d, i);
  }
  store->gates.resize(c.layers);
  parallel_for(c.layers, o.threads, [&](uint64_t i, uint64_t) {
    dsv4_layer_w& L = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    L.attn_norm = b.vec(p + "attn_norm.weight", d, 1.0f, 0.1f);
    L.ffn_norm = b.vec(p + "ffn_norm.weight", d, 1.0f, 0.1f);
    L.q_norm = b.vec(p + "attn.q_norm.weight", q, 1.0f, 0.1f);
    L.kv_norm = b.vec(p + "attn.kv_norm.weight", hd, 1.0f, 0.1f);
    L.attn_sink = b.vec(p + "attn.attn_sink", H, 0.0f, 0.5f);
    L.hc_attn_fn = b.mat(p + "hc_attn_fn", hcd, c.hc * d);
    L.hc_attn_base = b.vec(p + "hc_attn_base", hcd, 0.0f, 0.1f);
    L.hc_attn_scale = b.vec(p + "hc_attn_scale", 3, 0.5f, 0.05f);
    L.hc_ffn_fn = b.mat(p + "hc_ffn_fn", hcd, c.hc * d);
    L.hc_ffn_base = b.vec(p + "hc_ffn_base", hcd, 0.0f, 0.1f);
    L.hc_ffn_scale = b.vec(p + "hc_ffn_scale", 3, 0.5f, 0.05f);
    std::vector<float>& g = store->gates[i];
    g = b.mat(p + "ffn.gate.weight", E, d);
    L.gate.fmt = format::f32;
    L.gate.v = matrix_view{reinterpret_cast<const uint8_t*>(g.data()), g.size() * sizeof(float), nullptr, 0,
                           scale_encoding::none, E, d};
    if (L.kind.hash)
      L.tid2eid = b.tid2eid(p + "ffn.gate.tid2eid", c.vocab, c.top_k, c.experts);
    else
      L.gate_bias = b.vec(p + "ffn.gate.bias", E, 0.0f, 0.02f);
  });
  w.keep_alive = store;
  return w;
}

}  // namespace cmfx::driver
