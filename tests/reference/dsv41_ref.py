#!/usr/bin/python3
"""Independent float64 NumPy reference of the DeepSeek-V4.1-Flash text forward pass (dsv4-architecture.md §4),
written from the spec in the official *prefill* formulation (whole-sequence matrices and masks), sharing no
structure with the C++ graph (a per-token state machine). Primitives (RMSNorm, RoPE, Sinkhorn, top-k tie rule) come
from dsv4_ref.py, whose self-test checks them against the spec's values.

Reads a release-layout checkpoint whose tensors are F32/BF16/F16 (`cmfx make-toy --arch v41 --layout release
--quant f32`) plus the Engram tables in the release's FP8 E4M3 with a UE8M0 scale per 32 values of a row (decoded
and cast to bf16 as the official code does): config.json (model_type deepseek_v41, text model under text_config),
the index and its shards.

  --kv-quant            apply the V4.1 cache quantisation (window KV FP8 E4M3 / 32, compressed KV FP4 E2M1 with an
                        E4M3 scale / 16, index keys and q FP4 E2M1 / 32) — cmfx's qat_kv option
  --decode-from P       positions >= P are treated as one-token decode steps (prefill of P tokens first): with
  --stale-index-k       the official shared-runtime behaviour is emulated for those steps (a ratio > 1 KV source
                        that closes no group scores against the last publisher's index keys, spec §4.2)
Outputs: --out-logits (float32 [T, vocab]) and --out-trace (JSON {"topk": {layer: [[sorted picks] per token]},
"experts": {layer: [...]}}).

Invoke as /usr/bin/python3 (Debian's python3-numpy).
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsv4_ref import (hc_post, hc_split, rms, rope, rope_freqs, sigmoid, softplus,  # noqa: E402
                      topk_stable)


# ---- the V4.1 quantisers (spec §3.6, §8) -------------------------------------------------------------------------

def round_minifloat(x, man_bits, min_exp):
    """Round to the nearest value of a sign + exponent + man_bits float grid whose smallest normal exponent is
    min_exp (subnormals below), ties to even. Callers clamp to the format's maximum first."""
    ax = np.abs(x)
    e = np.floor(np.log2(np.where(ax > 0, ax, 1.0)))
    step = np.exp2(np.maximum(e, min_exp) - man_bits)
    return np.sign(x) * np.round(ax / step) * step


def e4m3(x):
    return round_minifloat(np.clip(x, -448, 448), 3, -6)


def e2m1(x):
    return round_minifloat(np.clip(x, -6, 6), 1, 0)


def pow2_ceil(q):
    return np.exp2(np.ceil(np.log2(q)))


def blocks(x, b):
    return x.reshape(x.shape[:-1] + (x.shape[-1] // b, b))


def act_quant_fp8(x, b):
    """FP8 E4M3 with a power-of-two (UE8M0) scale per block of b along the last axis."""
    xb = blocks(x, b)
    amax = np.maximum(np.abs(xb).max(axis=-1, keepdims=True), 1e-4)
    s = pow2_ceil(amax / 448.0)
    return (e4m3(xb / s) * s).reshape(x.shape)


def fp4_pow2(x, b):
    """FP4 E2M1 with a power-of-two scale per block (index keys and q)."""
    xb = blocks(x, b)
    amax = np.maximum(np.abs(xb).max(axis=-1, keepdims=True), 6.0 * 2.0 ** -126)
    s = pow2_ceil(amax / 6.0)
    return (e2m1(xb / s) * s).reshape(x.shape)


def fp4_e4m3_scale(x, b):
    """FP4 E2M1 with an E4M3 scale per block (compressed KV): s = e4m3(max(amax, 6·2^-9)/6)."""
    xb = blocks(x, b)
    amax = np.maximum(np.abs(xb).max(axis=-1, keepdims=True), 6.0 * 2.0 ** -9)
    s = e4m3(amax / 6.0)
    return (e2m1(xb / s) * s).reshape(x.shape)


# ---- the model ---------------------------------------------------------------------------------------------------

def e4m3_decode(b):
    """FP8 E4M3fn bytes → float64, from the bit layout (sign, 4 exponent bits with bias 7, 3 mantissa bits; exponent
    field 0 = subnormal m/8·2^-6; S.1111.111 = NaN)."""
    b = b.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * np.exp2(e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return sign * v


def bf16_round(x):
    """Round float64 values (exactly representable in f32) to bf16, nearest-even, as torch's .to(torch.bfloat16)."""
    f = x.astype(np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def load_shard(path):
    """A safetensors shard: F32/BF16/F16 as float64, I32/I64 as int64, F8_E4M3 / F8_E8M0 (the V4.1 Engram table and
    its per-row scales) as ("fp8" | "e8m0", uint8 array) for resolve_fp8."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw, dt, shape = data[8 + n + b: 8 + n + end], e["dtype"], e["shape"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt in ("I32", "I64"):
            a = np.frombuffer(raw, dtype="<i4" if dt == "I32" else "<i8").astype(np.int64)
        elif dt in ("F8_E4M3", "F8_E8M0"):
            out[name] = ("fp8" if dt == "F8_E4M3" else "e8m0", np.frombuffer(raw, dtype=np.uint8).reshape(shape))
            continue
        else:
            sys.exit(f"dsv41_ref: tensor {name} has dtype {dt}; the reference reads f32/bf16/f16/int tensors and "
                     "FP8 Engram tables only (make-toy --quant f32)")
        out[name] = a.reshape(shape)
    return out


def resolve_fp8(t):
    """FP8 tensors with their sibling `.scale`: the V4.1 Engram table, E4M3 [rows, cols] with one UE8M0 scale per 32
    values of a row, becomes bf16(e4m3·2^(k−127)) — the official `(fp8.float() * scale).to(bf16)`."""
    for k in [k for k, v in t.items() if isinstance(v, tuple) and v[0] == "fp8"]:
        stem = k[: -len(".weight")] if k.endswith(".weight") else k
        q = t[k][1]
        kind, sc = t.pop(stem + ".scale")
        assert kind == "e8m0", f"{stem}.scale must be UE8M0"
        rows, cols = q.shape
        assert sc.shape == (rows, cols // 32), f"{k}: only per-row 32-blocks are read by the reference"
        s = np.exp2(sc.astype(np.float64) - 127.0)
        t[k] = bf16_round(e4m3_decode(q) * np.repeat(s, 32, axis=1))
    return t


def load_model(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    t = {}
    for s in shards:
        t.update(load_shard(os.path.join(d, s)))
    return cfg, resolve_fp8(t)


class Ref41:
    def __init__(self, cfg, t, kv_quant, decode_from, stale):
        if cfg.get("model_type") != "deepseek_v41":
            sys.exit("dsv41_ref: config.json model_type is not deepseek_v41")
        c = cfg["text_config"]
        self.t = t
        self.c = c
        self.L = c["num_hidden_layers"]
        self.d, self.H, self.hd, self.rd = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["qk_rope_head_dim"]
        self.G, self.ol, self.W = c["o_groups"], c["o_lora_rank"], c["sliding_window"]
        self.IH, self.IHD, self.itopk = c["index_n_heads"], c["index_head_dim"], c["index_topk"]
        self.ratios = c["compress_ratios"][: self.L]
        self.kv_src, self.ix_src = c["kv_source_layer_ids"], c["index_source_layer_ids"]
        self.cand_src = c.get("candidate_source_layer_id", -1)
        self.cand_k, self.cand_bs = c["candidate_topk_blocks"], c["candidate_block_size"]
        self.E, self.K = c["n_routed_experts"], c["num_experts_per_tok"]
        self.scale, self.limit, self.temp = c["routed_scaling_factor"], c["swiglu_limit"], c.get("gate_temp", 1.0)
        self.hc, self.iters, self.hc_eps, self.eps = c["hc_mult"], c["hc_sinkhorn_iters"], c["hc_eps"], c["rms_norm_eps"]
        ys = c["rope_scaling"]
        self.f_swa = rope_freqs(self.rd, c["rope_theta"], False, 1, 1, 1, 1)
        self.f_comp = rope_freqs(self.rd, c["compress_rope_theta"], True, ys["factor"],
                                 ys["original_max_position_embeddings"], ys["beta_fast"], ys["beta_slow"])
        self.kvq, self.decode_from, self.stale = kv_quant, decode_from, stale
        self.engram_layers = c.get("engram_layer_ids", [])
        if self.engram_layers:
            assert c.get("engram_token_map") == "mod", "the reference knows only the toy's compressed-id rule"
            self.build_engram_layout()

    def w(self, n):
        return self.t[n]

    # -- Engram (spec §4.4) --
    def build_engram_layout(self):
        c = self.c
        seen, self.primes, self.offs = set(), [], []

        def prime(n):
            return n > 1 and all(n % p for p in range(2, int(n ** 0.5) + 1))

        for _ in self.engram_layers:
            pr = []
            for _ in range(c["engram_max_ngram_size"] - 1):
                cur = c["engram_vocab_size"] - 1
                for _ in range(c["engram_n_heads"]):
                    cur += 1
                    while not prime(cur) or cur in seen:
                        cur += 1
                    seen.add(cur)
                    pr.append(cur)
            self.primes.append(pr)
            self.offs.append([sum(pr[:k]) for k in range(len(pr))])
        for e, rows in enumerate(c["engram_num_embeddings"]):
            assert rows == sum(self.primes[e]), "engram_num_embeddings disagrees with the primes"

    def engram(self, e, layer, X, ids):
        c = self.c
        T, nmax, heads = len(ids), c["engram_max_ngram_size"], c["engram_n_heads"]
        cv = c["engram_compressed_vocab_size"]
        cid = [int(x) % cv for x in ids]
        pad = c["engram_pad_token_id"] % cv
        mult = [int(m) for m in c["engram_multipliers"][e]]
        rows = np.zeros((T, (nmax - 1) * heads), dtype=np.int64)
        for t in range(T):
            hist = [cid[t - s] if t >= s else pad for s in range(nmax)]
            r = hist[0] * mult[0]
            for s in range(1, nmax):
                r ^= hist[s] * mult[s]
                for h in range(heads):
                    k = (s - 1) * heads + h
                    rows[t, k] = r % self.primes[e][k] + self.offs[e][k]
        p = f"layers.{layer}.engram."
        Et = self.w(p + "embed.weight")[rows].reshape(T, -1)          # order-major concatenation
        kv = Et @ self.w(p + "wkv.weight").T
        d = self.d
        key, value = kv[:, : self.hc * d].reshape(T, self.hc, d), kv[:, self.hc * d:]
        wt = self.w(p + "q_weight") * self.w(p + "k_weight")
        rstd = 1 / np.sqrt((X * X).mean(-1) + self.eps) / np.sqrt((key * key).mean(-1) + self.eps)
        dot = (X * wt[None] * key).sum(-1) * rstd / math.sqrt(d)
        g = sigmoid(np.copysign(np.sqrt(np.maximum(np.abs(dot), 1e-6)), dot))
        return X + g[:, :, None] * value[:, None, :]

    # -- CSA2 attention (spec §4.2) --
    def owner_before_step(self, T):
        """The layer that last published index keys before each position's step (official shared runtime)."""
        P = self.decode_from
        owners = [l for l in range(self.L) if l in self.kv_src]
        prev, out = -1, []
        pre_pub = [l for l in owners if P >= self.ratios[l]]
        after_prefill = pre_pub[-1] if pre_pub else -1
        for t in range(T):
            if t < P:
                out.append(-1)
                continue
            if t == P:
                prev = after_prefill
            out.append(prev)
            pub = [l for l in owners if (t + 1) % self.ratios[l] == 0]
            if pub:
                prev = pub[-1]
        return out

    def keys_for(self, l, t, static):
        if not self.stale or t < self.decode_from:
            return static
        if l in self.kv_src and (t + 1) % self.ratios[l] == 0:
            return l
        earlier = [k for k in self.kv_src if k < l and (t + 1) % self.ratios[k] == 0]
        if earlier:
            return max(earlier)
        return self.prev_owner[t] if self.prev_owner[t] >= 0 else static

    def candidates(self, score, ne):
        bs = self.cand_bs
        nb = -(-ne // bs)
        blk = np.full(nb, -np.inf)
        for j in range(ne):
            blk[j // bs] = max(blk[j // bs], score[j])
        blk[(ne - 1) // bs] = np.inf
        keep = np.zeros(ne, dtype=bool)
        for b in topk_stable(blk, min(self.cand_k, nb)):
            if blk[b] > -np.inf:
                keep[b * bs: min(ne, (b + 1) * bs)] = True
        return keep

    def attention(self, i, u, sh, trace):
        p = f"layers.{i}.attn."
        T, H, hd, rd = u.shape[0], self.H, self.hd, self.rd
        r = self.ratios[i]
        f = self.f_comp if r else self.f_swa
        pos = np.arange(T)
        qr = rms(u @ self.w(p + "wq_a.weight").T, self.w(p + "q_norm.weight"), self.eps)
        q = rope((qr @ self.w(p + "wq_b.weight").T).reshape(T, H, hd), pos, f)   # no per-head q norm in V4.1
        kv = rope(rms(u @ self.w(p + "wkv.weight").T, self.w(p + "kv_norm.weight"), self.eps), pos, f)
        if self.kvq:
            kv = act_quant_fp8(kv, 32)
        picks = [np.zeros(0, dtype=np.int64)] * T
        ent = np.zeros((0, hd))
        if r:
            if i in self.kv_src:
                a = u @ self.w(p + "compressor.wkv.weight").T
                ng = T // r
                if r == 1:
                    pooled = a
                else:
                    s = u @ self.w(p + "compressor.wgate.weight").T
                    aw, sw = a[: ng * r].reshape(ng, r, hd), s[: ng * r].reshape(ng, r, hd)
                    e = np.exp(sw - sw.max(axis=1, keepdims=True))
                    pooled = (aw * e / e.sum(axis=1, keepdims=True)).sum(axis=1)
                lat = rms(pooled, self.w(p + "compressor.norm.weight"), self.eps)     # pre-rope latent
                gpos = np.arange(ng) * r                                               # group j stands for j·r
                keys = rope(rms(lat @ self.w(p + "indexer.wk.weight").T, self.w(p + "indexer.k_norm.weight"), self.eps),
                            gpos, f)
                ent = rope(lat, gpos, f)
                if self.kvq:
                    keys, ent = fp4_pow2(keys, 32), fp4_e4m3_scale(ent, 16)
                sh["kv"][i], sh["keys"][i] = ent, keys
            vis = (pos + 1) // r
            if i in self.ix_src:
                iq = rope((qr @ self.w(p + "indexer.wq_b.weight").T).reshape(T, self.IH, self.IHD), pos, f)
                if self.kvq:
                    iq = fp4_pow2(iq.reshape(T, -1), 32).reshape(T, self.IH, self.IHD)
                iw = (u @ self.w(p + "indexer.weights_proj.weight").T) * (self.IHD ** -0.5 * self.IH ** -0.5)
                static = max(k for k in self.kv_src if k <= i)
                out = []
                for t in range(T):
                    ne = vis[t]
                    src = self.keys_for(i, t, static)
                    # A later layer's keys (official decode: published on the previous step) come from the previous
                    # pass of the fixed-point iteration in forward(); rows < ne only depend on earlier positions.
                    K = (sh["keys"][src] if src <= i else self.prev_keys.get(src, sh["keys"][static]))[:ne]
                    sc = (np.maximum(np.einsum("hc,jc->hj", iq[t], K), 0) * iw[t][:, None]).sum(axis=0)
                    if i == self.cand_src:
                        sh["cand"][t] = self.candidates(sc, ne) if ne else np.zeros(0, dtype=bool)
                    elif self.cand_src >= 0 and i > self.cand_src:
                        sc = np.where(sh["cand"][t][:ne], sc, -np.inf)
                    sel = topk_stable(sc, min(self.itopk, ne)) if ne else np.zeros(0, dtype=np.int64)
                    out.append(np.sort(sel[np.isfinite(sc[sel])]))
                sh["topk"][i] = out
                trace["topk"][str(i)] = [x.tolist() for x in out]
            src_ix = max(k for k in self.ix_src if k <= i)
            src_kv = max(k for k in self.kv_src if k <= i)
            picks, ent = sh["topk"][src_ix], sh["kv"][src_kv]
        sink = self.w(p + "attn_sink")
        o = np.zeros((T, H, hd))
        for t in range(T):
            keys = np.concatenate([kv[max(0, t - self.W + 1): t + 1], ent[picks[t]]], axis=0)
            lg = (q[t] @ keys.T) * hd ** -0.5
            m = np.maximum(lg.max(axis=1), sink)
            e = np.exp(lg - m[:, None])
            o[t] = (e / (e.sum(axis=1) + np.exp(sink - m))[:, None]) @ keys
        o = rope(o, pos, f, inverse=True)
        z = np.einsum("tgc,grc->tgr", o.reshape(T, self.G, -1), self.w(p + "wo_a.weight").reshape(self.G, self.ol, -1))
        return z.reshape(T, -1) @ self.w(p + "wo_b.weight").T

    def expert(self, p, x):
        g = np.minimum(x @ self.w(p + "w1.weight").T, self.limit)
        v = np.clip(x @ self.w(p + "w3.weight").T, -self.limit, self.limit)
        return g * sigmoid(g) * v

    def moe(self, i, u, trace):
        p = f"layers.{i}.ffn."
        T = u.shape[0]
        s = np.sqrt(softplus((u @ self.w(p + "gate.weight").T) / self.temp))
        b = s + self.w(p + "gate.bias")[None]
        idx = np.stack([topk_stable(b[t], self.K) for t in range(T)])
        wts = np.take_along_axis(s, idx, axis=1)
        wts = wts / (wts.sum(axis=1, keepdims=True) + 1e-20) * self.scale
        trace["experts"][str(i)] = [sorted(int(e) for e in row) for row in idx]
        y = np.zeros_like(u)
        for e in range(self.E):
            rows, slot = np.nonzero(idx == e)
            if len(rows):
                q = f"{p}experts.{e}."
                np.add.at(y, rows, (self.expert(q, u[rows]) * wts[rows, slot][:, None]) @ self.w(q + "w2.weight").T)
        sh = p + "shared_experts."
        return y + self.expert(sh, u) @ self.w(sh + "w2.weight").T

    def mixes(self, X, p):
        T = X.shape[0]
        flat = X.reshape(T, -1)
        m = (flat @ self.w(p + "_fn").T) / np.sqrt(np.mean(flat * flat, axis=1, keepdims=True) + self.eps)
        return hc_split(m, self.w(p + "_base"), self.w(p + "_scale"), self.hc, self.hc_eps, self.iters)

    def forward(self, ids):
        """One prefill-form pass; with --stale-index-k over decode positions, repeated until the index keys that
        earlier layers borrow from later ones stop changing (each pass fixes at least the next half of the
        positions, so this is the exact sequential result)."""
        self.prev_keys = {}
        for _ in range(64):
            h, trace, keys = self.forward_pass(ids)
            if not self.stale or self.decode_from >= len(ids) or all(
                    k in self.prev_keys and np.array_equal(keys[k], self.prev_keys[k]) for k in keys):
                return h, trace
            self.prev_keys = keys
        sys.exit("dsv41_ref: the stale-index-key iteration did not converge")

    def forward_pass(self, ids):
        T = len(ids)
        self.prev_owner = self.owner_before_step(T)
        trace = {"topk": {}, "experts": {}}
        sh = {"kv": {}, "keys": {}, "topk": {}, "cand": [None] * T}
        X = np.repeat(self.w("embed.weight")[ids][:, None, :], self.hc, axis=1)
        pre_mix = np.zeros((T, self.hc))
        pre_mix[:, 0] = 1.0                                   # the first attention reads copy 0
        for i in range(self.L):
            p = f"layers.{i}."
            if i in self.engram_layers:
                X = self.engram(self.engram_layers.index(i), i, X, ids)
            a_pre, a_post, a_C = self.mixes(X, p + "hc_attn")
            o = self.attention(i, rms(np.einsum("tj,tjd->td", pre_mix, X), self.w(p + "attn_norm.weight"), self.eps),
                               sh, trace)
            X = hc_post(o, X, a_post, a_C)
            f_pre, f_post, f_C = self.mixes(X, p + "hc_ffn")
            o = self.moe(i, rms(np.einsum("tj,tjd->td", a_pre, X), self.w(p + "ffn_norm.weight"), self.eps), trace)
            X = hc_post(o, X, f_post, f_C)
            pre_mix = f_pre                                   # one-sublayer lag
        h = rms(np.einsum("tj,tjd->td", pre_mix, X), self.w("norm.weight"), self.eps)
        return h, trace, sh["keys"]


def self_test():
    # Quantiser grids: e2m1 {0, .5, 1, 1.5, 2, 3, 4, 6}, ties to even; e4m3 max 448, subnormal step 2^-9.
    assert list(e2m1(np.array([0.25, 0.75, 1.25, 2.5, 5.0, 7.0, -0.3]))) == [0.0, 1.0, 1.0, 2.0, 4.0, 6.0, -0.5]
    assert list(e4m3(np.array([448.0, 500.0, 2.0 ** -10, 3 * 2.0 ** -10, 1.0625, 1.1875]))) == \
        [448.0, 448.0, 0.0, 2.0 ** -8, 1.0, 1.25]
    x = np.array([[3.0, -0.1, 0.2, 0.05] * 4])
    y = fp4_e4m3_scale(x, 16)
    assert y[0, 0] == 3.0 and np.all(np.abs(y - x) <= 0.5 * 0.5 + 1e-12), y
    # E4M3 bytes: 0x7E = 448, 0x01 = 2^-9 (smallest subnormal), 0x38 = 1, 0xB9 = -1.125, 0x08 = 2^-6; 0x7F = NaN.
    v = e4m3_decode(np.array([0x7E, 0x01, 0x38, 0xB9, 0x08, 0x7F], dtype=np.uint8))
    assert list(v[:5]) == [448.0, 2.0 ** -9, 1.0, -1.125, 2.0 ** -6] and np.isnan(v[5]), v
    # Every E4M3 value times 2^k is on the E4M3 grid, so round-trips E4M3 encode/decode of the reference's own rounding.
    grid = e4m3_decode(np.arange(0, 256, dtype=np.uint8))
    ok = ~np.isnan(grid)
    assert np.array_equal(e4m3(grid[ok]), grid[ok])
    # bf16: ties to even at the 8th mantissa bit; values with ≤ 8 significant bits unchanged.
    assert list(bf16_round(np.array([1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -7, 448.0 * 2.0 ** -20]))) == \
        [1.0, 1.0 + 2.0 ** -6, 1.0 + 2.0 ** -7, 448.0 * 2.0 ** -20]
    print("dsv41_ref self-test: ok")


def quant_check(inp, out):
    """The three V4.1 quantisers over the float32 blocks in `inp` must equal the float32 results in `out`
    (written by the C++ test): FP8 / 32, FP4 pow2 / 32, FP4 E4M3-scale / 16, in that order."""
    x = np.fromfile(inp, "<f4").astype(np.float64).reshape(1, -1)
    o = np.fromfile(out, "<f4").reshape(3, -1)
    bad = 0
    for k, (fn, b) in enumerate([(act_quant_fp8, 32), (fp4_pow2, 32), (fp4_e4m3_scale, 16)]):
        d = np.nonzero(fn(x, b)[0] != o[k])[0]
        if len(d):
            print(f"quantiser {k}: {len(d)} differences, first at {d[0]}: in {x[0, d[0]]!r}")
            bad += 1
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) == 4 and sys.argv[1] == "--quant-check":
        sys.exit(quant_check(sys.argv[2], sys.argv[3]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ids-file", required=True)
    ap.add_argument("--out-logits", required=True)
    ap.add_argument("--out-trace", required=True)
    ap.add_argument("--kv-quant", action="store_true")
    ap.add_argument("--decode-from", type=int, default=1 << 62)
    ap.add_argument("--stale-index-k", action="store_true")
    a = ap.parse_args()
    cfg, tensors = load_model(a.model)
    with open(a.ids_file) as f:
        ids = np.array([int(x) for x in f.read().split()], dtype=np.int64)
    ref = Ref41(cfg, tensors, a.kv_quant, a.decode_from, a.stale_index_k)
    h, trace = ref.forward(ids)
    head = tensors["head.weight"]
    with open(a.out_logits, "wb") as f:
        for b in range(0, len(ids), 64):
            f.write((h[b:b + 64] @ head.T).astype("<f4").tobytes())
    with open(a.out_trace, "w") as f:
        json.dump(trace, f)
    print(f"dsv41_ref: {len(ids)} tokens, {ref.L} layers, logits [{len(ids)}, {head.shape[0]}]")


if __name__ == "__main__":
    main()
