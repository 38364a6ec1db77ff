#!/usr/bin/python3
"""Independent float64 NumPy reference of the DeepSeek-V4-Flash forward pass (dsv4-architecture.md §3),
written from the spec in the official *prefill* formulation (whole-sequence matrices and masks), so it shares
no structure with the C++ graph (which runs a per-token state machine).

Reads a release-layout checkpoint whose tensors are F32/BF16/F16/I32 (`cmfx make-toy --layout release --quant
f32`): config.json, model.safetensors.index.json and its shards. Runs one prefill over the given token ids and
writes
  --out-logits FILE   float32 little-endian [T, vocab] logits of every position
  --out-trace FILE    JSON {"topk": {layer: [[sorted picks] per token]}, "experts": {layer: [[sorted ids] ...]}}
No QAT fake-quant and no Hadamard (they cancel without the FP4 step), as in the cmfx default options.

Invoke as /usr/bin/python3 (Debian's python3-numpy).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


# ---- checkpoint -------------------------------------------------------------------------------------------------

def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b: base + end]
        dt, shape = e["dtype"], e["shape"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt == "I32":
            a = np.frombuffer(raw, dtype="<i4").astype(np.int64)
        elif dt == "I64":
            a = np.frombuffer(raw, dtype="<i8").astype(np.int64)
        else:
            sys.exit(f"dsv4_ref: tensor {name} has dtype {dt}; the reference reads f32/bf16/f16/int checkpoints only")
        out[name] = a.reshape(shape)
    return out


def load_model(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = [x for x in os.listdir(d) if x.endswith(".safetensors")]
    for s in shards:
        tensors.update(load_safetensors(os.path.join(d, s)))
    return cfg, tensors


# ---- primitives (spec §3) ---------------------------------------------------------------------------------------

def rms(x, w, eps):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def rope_freqs(dim, base, yarn, factor, original, beta_fast, beta_slow):
    f = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    if yarn:
        corr = lambda r: dim * math.log(original / (2 * math.pi * r)) / (2 * math.log(base))
        lo = max(math.floor(corr(beta_fast)), 0)
        hi = min(math.ceil(corr(beta_slow)), dim - 1)
        ramp = np.clip((np.arange(dim // 2) - lo) / max(hi - lo, 1e-3), 0, 1)
        f = f / factor * ramp + f * (1 - ramp)
    return f


def rope(x, pos, f, inverse=False):
    """Adjacent pairs (x[2i], x[2i+1]) of the LAST 2·len(f) channels, rotated by the angle pos·f_i (conjugate when
    inverse). x is [T, ..., D]; pos is [T]."""
    D, rd = x.shape[-1], 2 * len(f)
    ang = np.asarray(pos, dtype=np.float64).reshape((-1,) + (1,) * (x.ndim - 1)) * f
    c, s = np.cos(ang), np.sin(ang)
    if inverse:
        s = -s
    y = x.copy()
    a, b = x[..., D - rd::2], x[..., D - rd + 1::2]
    y[..., D - rd::2] = a * c - b * s
    y[..., D - rd + 1::2] = a * s + b * c
    return y


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def hc_split(m, base, scale, hc, hc_eps, iters):
    """mixes m [T, (2+hc)·hc] → pre [T, hc], post [T, hc], C [T, hc, hc] (Sinkhorn ends on a column pass)."""
    T = m.shape[0]
    pre = sigmoid(m[:, :hc] * scale[0] + base[:hc]) + hc_eps
    post = 2 * sigmoid(m[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    C = (m[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(T, hc, hc)
    C = np.exp(C - C.max(axis=2, keepdims=True))
    C = C / C.sum(axis=2, keepdims=True) + hc_eps
    C = C / (C.sum(axis=1, keepdims=True) + hc_eps)
    for _ in range(iters - 1):
        C = C / (C.sum(axis=2, keepdims=True) + hc_eps)
        C = C / (C.sum(axis=1, keepdims=True) + hc_eps)
    return pre, post, C


def hc_pre(X, fn, base, scale, hc, eps, hc_eps, iters):
    T = X.shape[0]
    flat = X.reshape(T, -1)
    m = (flat @ fn.T) / np.sqrt(np.mean(flat * flat, axis=1, keepdims=True) + eps)
    pre, post, C = hc_split(m, base, scale, hc, hc_eps, iters)
    y = np.einsum("tj,tjd->td", pre, X)
    return y, post, C


def hc_post(o, X, post, C):
    # X'[k] = post[k]·o + Σ_j C[j,k]·X[j]   (C's first index is summed)
    return post[:, :, None] * o[:, None, :] + np.einsum("tjk,tjd->tkd", C, X)


def softplus(z):
    return np.where(z > 20, z, np.log1p(np.exp(np.minimum(z, 20))))


def topk_stable(scores, k):
    """Indices of the k largest, ties to the lower index (the cmfx contract)."""
    order = np.argsort(-scores, kind="stable")
    return order[:k]


# ---- the model --------------------------------------------------------------------------------------------------

class Ref:
    def __init__(self, cfg, t):
        self.t = t
        self.d = cfg["hidden_size"]
        self.L = cfg["num_hidden_layers"]
        self.H = cfg["num_attention_heads"]
        self.hd = cfg["head_dim"]
        self.rd = cfg["qk_rope_head_dim"]
        self.G = cfg["o_groups"]
        self.ol = cfg["o_lora_rank"]
        self.W = cfg["sliding_window"]
        self.IH = cfg["index_n_heads"]
        self.IHD = cfg["index_head_dim"]
        self.itopk = cfg["index_topk"]
        self.ratios = cfg["compress_ratios"][: self.L]
        self.nhash = cfg["num_hash_layers"]
        self.E = cfg["n_routed_experts"]
        self.K = cfg["num_experts_per_tok"]
        self.scale = cfg["routed_scaling_factor"]
        self.limit = cfg["swiglu_limit"]
        self.hc = cfg["hc_mult"]
        self.iters = cfg["hc_sinkhorn_iters"]
        self.hc_eps = cfg["hc_eps"]
        self.eps = cfg["rms_norm_eps"]
        ys = cfg["rope_scaling"]
        self.f_swa = rope_freqs(self.rd, cfg["rope_theta"], False, 1, 1, 1, 1)
        self.f_comp = rope_freqs(self.rd, cfg["compress_rope_theta"], True, ys["factor"],
                                 ys["original_max_position_embeddings"], ys["beta_fast"], ys["beta_slow"])

    def w(self, name):
        return self.t[name]

    def compress(self, p, u, ratio, width, f):
        """Official prefill compressor: windows k = tokens [k·r, (k+1)·r); overlap (r = 4) pools the previous
        window's first half with this window's second half; entry k rotated at position k·r."""
        overlap = ratio == 4
        kv = u @ self.w(p + "wkv.weight").T
        sc = u @ self.w(p + "wgate.weight").T
        T = u.shape[0]
        nw = T // ratio
        if nw == 0:
            return np.zeros((0, width))
        cut = nw * ratio
        kvw = kv[:cut].reshape(nw, ratio, -1)
        scw = sc[:cut].reshape(nw, ratio, -1) + self.w(p + "ape")[None]
        if overlap:
            k2 = np.zeros((nw, 2 * ratio, width))
            s2 = np.full((nw, 2 * ratio, width), -np.inf)
            k2[:, ratio:] = kvw[:, :, width:]
            s2[:, ratio:] = scw[:, :, width:]
            k2[1:, :ratio] = kvw[:-1, :, :width]
            s2[1:, :ratio] = scw[:-1, :, :width]
            kvw, scw = k2, s2
        e = np.exp(scw - scw.max(axis=1, keepdims=True))
        pooled = (kvw * (e / e.sum(axis=1, keepdims=True))).sum(axis=1)
        ent = rms(pooled, self.w(p + "norm.weight"), self.eps)
        return rope(ent, np.arange(nw) * ratio, f)

    def attention(self, i, u, trace):
        p = f"layers.{i}.attn."
        T, H, hd = u.shape[0], self.H, self.hd
        ratio = self.ratios[i]
        f = self.f_comp if ratio else self.f_swa
        pos = np.arange(T)
        qr = rms(u @ self.w(p + "wq_a.weight").T, self.w(p + "q_norm.weight"), self.eps)
        q = (qr @ self.w(p + "wq_b.weight").T).reshape(T, H, hd)
        q = rms(q, None, self.eps)
        q = rope(q, pos, f)
        kv = rms(u @ self.w(p + "wkv.weight").T, self.w(p + "kv_norm.weight"), self.eps)
        kv = rope(kv, pos, f)
        ent = np.zeros((0, hd))
        visible = (pos + 1) // ratio if ratio else np.zeros(T, dtype=np.int64)
        picks = [np.arange(visible[t]) for t in range(T)]
        if ratio:
            ent = self.compress(p + "compressor.", u, ratio, hd, f)
        if ratio == 4:
            ik = self.compress(p + "indexer.compressor.", u, 4, self.IHD, f)
            iq = (qr @ self.w(p + "indexer.wq_b.weight").T).reshape(T, self.IH, self.IHD)
            iq = rope(iq, pos, f)
            iw = (u @ self.w(p + "indexer.weights_proj.weight").T) * (self.IHD ** -0.5 * self.IH ** -0.5)
            score = np.einsum("thc,jc->thj", iq, ik)
            score = (np.maximum(score, 0) * iw[:, :, None]).sum(axis=1)   # [T, nw]; ReLU before weighting
            nw = ik.shape[0]
            mask = np.arange(nw)[None, :] >= visible[:, None]
            score = np.where(mask, -np.inf, score)
            k = min(self.itopk, nw)
            picks = []
            for t in range(T):
                sel = topk_stable(score[t], k) if k else np.zeros(0, dtype=np.int64)
                picks.append(np.sort(sel[sel < visible[t]]))
            trace["topk"][str(i)] = [pk.tolist() for pk in picks]
        sink = self.w(p + "attn_sink")
        o = np.zeros((T, H, hd))
        for t in range(T):
            keys = np.concatenate([kv[max(0, t - self.W + 1): t + 1], ent[picks[t]]], axis=0)
            lg = (q[t] @ keys.T) * hd ** -0.5                     # [H, nk]
            m = np.maximum(lg.max(axis=1), sink)
            e = np.exp(lg - m[:, None])
            den = e.sum(axis=1) + np.exp(sink - m)
            o[t] = (e / den[:, None]) @ keys
        o = rope(o, pos, f, inverse=True)
        og = o.reshape(T, self.G, -1)
        woa = self.w(p + "wo_a.weight").reshape(self.G, self.ol, -1)
        z = np.einsum("tgc,grc->tgr", og, woa).reshape(T, -1)
        return z @ self.w(p + "wo_b.weight").T

    def expert(self, p, x):
        g = np.minimum(x @ self.w(p + "w1.weight").T, self.limit)
        v = np.clip(x @ self.w(p + "w3.weight").T, -self.limit, self.limit)
        return g * sigmoid(g) * v

    def moe(self, i, u, ids, trace):
        p = f"layers.{i}.ffn."
        T = u.shape[0]
        s = np.sqrt(softplus(u @ self.w(p + "gate.weight").T))
        if i < self.nhash and (p + "gate.tid2eid") in self.t:
            idx = self.w(p + "gate.tid2eid")[ids]
        else:
            b = s + self.w(p + "gate.bias")[None]
            idx = np.stack([topk_stable(b[t], self.K) for t in range(T)])
        wts = np.take_along_axis(s, idx, axis=1)
        wts = wts / wts.sum(axis=1, keepdims=True) * self.scale
        trace["experts"][str(i)] = [sorted(int(e) for e in row) for row in idx]
        y = np.zeros_like(u)
        for e in range(self.E):
            rows, slot = np.nonzero(idx == e)
            if len(rows) == 0:
                continue
            q = f"{p}experts.{e}."
            h = self.expert(q, u[rows]) * wts[rows, slot][:, None]
            np.add.at(y, rows, h @ self.w(q + "w2.weight").T)
        sh = p + "shared_experts."
        return y + self.expert(sh, u) @ self.w(sh + "w2.weight").T

    def forward(self, ids):
        T = len(ids)
        trace = {"topk": {}, "experts": {}}
        X = np.repeat(self.w("embed.weight")[ids][:, None, :], self.hc, axis=1)
        for i in range(self.L):
            p = f"layers.{i}."
            y, post, C = hc_pre(X, self.w(p + "hc_attn_fn"), self.w(p + "hc_attn_base"), self.w(p + "hc_attn_scale"),
                                self.hc, self.eps, self.hc_eps, self.iters)
            o = self.attention(i, rms(y, self.w(p + "attn_norm.weight"), self.eps), trace)
            X = hc_post(o, X, post, C)
            y, post, C = hc_pre(X, self.w(p + "hc_ffn_fn"), self.w(p + "hc_ffn_base"), self.w(p + "hc_ffn_scale"),
                                self.hc, self.eps, self.hc_eps, self.iters)
            o = self.moe(i, rms(y, self.w(p + "ffn_norm.weight"), self.eps), ids, trace)
            X = hc_post(o, X, post, C)
        flat = X.reshape(T, -1)
        m = (flat @ self.w("hc_head_fn").T) / np.sqrt(np.mean(flat * flat, axis=1, keepdims=True) + self.eps)
        pre = sigmoid(m * self.w("hc_head_scale")[0] + self.w("hc_head_base")) + self.hc_eps
        h = rms(np.einsum("tj,tjd->td", pre, X), self.w("norm.weight"), self.eps)
        return h, trace


def self_test():
    """The reference's primitives against the spec's independent check values (dsv4-architecture.md §3.3, §9)."""
    i = np.arange(24)
    pre, post, C = hc_split((3 * np.sin(0.37 * i))[None], np.cos(0.11 * i), np.ones(3), 4, 1e-6, 20)
    assert np.allclose(pre[0], [0.7310596, 0.8888268, 0.9525191, 0.97424865], atol=1e-5), pre
    assert np.allclose(post[0], [1.9600224, 1.9534285, 1.9201256, 1.8160983], atol=1e-5), post
    want = [0.5996052, 0.2825359, 0.09218107, 0.025676856, 0.17564717, 0.22228767, 0.2717454, 0.3303188,
            0.029528176, 0.12206022, 0.32619134, 0.5222193, 0.19521846, 0.37311527, 0.30988118, 0.12178412]
    assert np.allclose(C[0].ravel(), want, atol=1e-4), C
    fc = rope_freqs(64, 160000, True, 16, 65536, 32, 1)
    for k, v in {0: 1.0, 1: 0.687656, 15: 3.635539e-3, 16: 2.265625e-3, 31: 5.680529e-7}.items():
        assert abs(fc[k] / v - 1) < 1e-5, (k, fc[k], v)
    fs = rope_freqs(64, 10000, False, 1, 1, 1, 1)
    assert abs(fs[1] / 0.7498942 - 1) < 1e-6 and abs(fs[31] / 1.333521e-4 - 1) < 1e-5, fs
    # Adjacent pairs, last channels only: a rotation of (x0, x1) = (1, 0) at pos 1 by f_0 = 1 rad.
    x = np.zeros((1, 6))
    x[0, 2] = 1.0
    y = rope(x, [1], np.array([1.0, 0.5]))
    assert np.allclose(y[0, :2], 0) and np.allclose(y[0, 2:4], [math.cos(1), math.sin(1)]), y
    assert np.allclose(rope(y, [1], np.array([1.0, 0.5]), inverse=True), x)
    print("dsv4_ref self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ids-file", required=True)
    ap.add_argument("--out-logits", required=True)
    ap.add_argument("--out-trace", required=True)
    a = ap.parse_args()
    cfg, tensors = load_model(a.model)
    with open(a.ids_file) as f:
        ids = np.array([int(x) for x in f.read().split()], dtype=np.int64)
    ref = Ref(cfg, tensors)
    h, trace = ref.forward(ids)
    head = tensors["head.weight"]
    with open(a.out_logits, "wb") as f:
        for b in range(0, len(ids), 64):
            f.write((h[b:b + 64] @ head.T).astype("<f4").tobytes())
    with open(a.out_trace, "w") as f:
        json.dump(trace, f)
    print(f"dsv4_ref: {len(ids)} tokens, {ref.L} layers, logits [{len(ids)}, {head.shape[0]}]")


if __name__ == "__main__":
    main()
