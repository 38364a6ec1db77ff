#!/usr/bin/env python3
"""`cmfx serve --backend vulkan` on the f32 toy (CTest `vk_serve`, label parity, lavapipe in CI).

usage: serve_gpu_test.py CMFX TOKENIZER_JSON TMPDIR

The GPU server must answer the same greedy requests with the same text as the CPU server (the f32 toy's logits
agree to NMSE ~1e-11, tests/parity/cases_model.cpp), reuse a prompt prefix on the device (the snapshot of the last
prompt), report its backend and expert cache on /metrics — with --vram-budget just above the minimum the cache is
active, counts hits and bytes, and the text stays the CPU's — and refuse --parallel 2. Exit 0 pass, 1 fail, 77 skip
(no tokenizer or no Vulkan device, except under CI=true where both fail).
"""
import http.client
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util  # noqa: E402

CMFX, TOKENIZER, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
serve_util.require_tokenizer(TOKENIZER, "serve_gpu_test")
CI = os.environ.get("CI", "").lower() == "true"
os.makedirs(TMP, exist_ok=True)
MODEL = os.path.join(TMP, "toy-f32.cmf")
subprocess.run([CMFX, "make-toy", "--out", MODEL, "--quant", "f32", "--tokenizer", TOKENIZER], check=True,
               stdout=subprocess.DEVNULL, timeout=60)

failures = []
servers = []


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f"  [{detail}]"), flush=True)
    if not cond:
        failures.append(name)


def finish():
    for s in servers:
        s.kill()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("all checks passed")
    sys.exit(0)


def start(name, *flags):
    s = serve_util.Server(CMFX, MODEL, TMP, name, *flags)
    servers.append(s)
    return s


def post(server, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, json.loads(payload)


def metrics(server):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return text


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


# A device first: without one the test is skipped (failed under CI), never passed.
probe = subprocess.run([CMFX, "run", MODEL, "--backend", "vulkan", "--raw-ids", "1 2", "-n", "1"],
                       capture_output=True, text=True, timeout=300)
if probe.returncode != 0:
    print(probe.stderr)
    print("serve_gpu_test: no usable Vulkan device" + ("; failing because CI=true" if CI else "; skipping"))
    sys.exit(1 if CI else 77)

try:
    cpu = start("cpu", "--threads", "2")
    # --gemm f32: the exact-text checks need the f32 tiles (f16 tiles, the default on tensor-core devices, round)
    gpu = start("gpu", "--backend", "vulkan", "--gemm", "f32")
except RuntimeError as e:
    check("servers start", False, str(e))
    finish()
check("gpu server logs its device", "on vulkan:" in gpu.text(), gpu.text()[-300:])

PROMPT = "The quick brown fox jumps over the lazy dog and"
REQS = [
    ("/v1/chat/completions", {"model": "toy-f32", "messages": [{"role": "user", "content": "Hello there"}],
                              "max_tokens": 10, "temperature": 0, "thinking": {"type": "disabled"}}),
    ("/v1/completions", {"model": "toy-f32", "prompt": PROMPT, "max_tokens": 12, "temperature": 0}),
    # extends PROMPT: the GPU slot's snapshot (the previous request's prompt) is a prefix of it
    ("/v1/completions", {"model": "toy-f32", "prompt": PROMPT + " then runs away", "max_tokens": 8,
                         "temperature": 0}),
]


def text_of(j):
    c = j["choices"][0]
    return c["text"] if "text" in c else c["message"].get("content")


outs = {}
for name, srv in (("cpu", cpu), ("gpu", gpu)):
    outs[name] = []
    for path, body in REQS:
        st, j = post(srv, path, body)
        check(f"{name} {path}: 200", st == 200, j)
        outs[name].append(j)
for i, (path, _) in enumerate(REQS):
    a, b = outs["cpu"][i], outs["gpu"][i]
    check(f"request {i} ({path}): GPU text == CPU text", text_of(a) == text_of(b), f"{text_of(a)!r} vs {text_of(b)!r}")
    check(f"request {i}: same usage token counts",
          a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"] and
          a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"], (a["usage"], b["usage"]))
cached = outs["gpu"][2]["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
check("gpu: the extended prompt reused the first prompt's tokens on the device", cached > 0, outs["gpu"][2]["usage"])

m = metrics(gpu)
check("gpu /metrics: backend vulkan", re.search(r'^cmfx_backend_info\{backend="vulkan",device="[^"]*"\} 1$', m, re.M)
      is not None, m[-600:])
check("gpu /metrics: every expert resident", metric(m, "cmfx_expert_cache_active") == 0.0)
check("gpu /metrics: device weight bytes", (metric(m, "cmfx_device_weight_bytes") or 0) > 0)
check("gpu /metrics: cached prompt tokens counted", (metric(m, "cmfx_prompt_tokens_cached_total") or 0) >= cached)
# temperature 0, one request at a time: the decode steps chained on the device (scheduler::try_chain)
check("gpu /metrics: greedy decode chained on the device", (metric(m, "cmfx_decode_chained_tokens_total") or 0) > 0,
      metric(m, "cmfx_decode_chained_tokens_total"))
check("cpu /metrics: backend cpu", 'cmfx_backend_info{backend="cpu"' in metrics(cpu))

# A sampled request (temperature, top-p, min-p, penalties, a seed): drawn on the device, chained (--sampling device, the
# default), and on a second server from the logits read back (--sampling host): the same text, token for token.
SAMPLED = ("/v1/completions", {"model": "toy-f32", "prompt": PROMPT, "max_tokens": 16, "temperature": 1.1,
                               "top_p": 0.95, "min_p": 0.02, "seed": 1234, "ignore_eos": True,
                               "presence_penalty": 0.5, "frequency_penalty": 0.3})
# Logprobs (of the raw logits; kernels::logprobs after each choice): a sampled request with 5 alternatives and a
# greedy chat request with 3 — chained too, and the same tokens and logprobs as the host's sampler gives.
LOGPROBS = [("/v1/completions", {"model": "toy-f32", "prompt": PROMPT, "max_tokens": 12, "temperature": 0.9,
                                 "top_p": 0.9, "seed": 77, "ignore_eos": True, "logprobs": 5}),
            ("/v1/chat/completions", {"model": "toy-f32", "messages": [{"role": "user", "content": PROMPT}],
                                      "max_tokens": 10, "temperature": 0, "ignore_eos": True, "logprobs": True,
                                      "top_logprobs": 3, "thinking": {"type": "disabled"}})]
dev_lp = {}
for name, (path, body) in [("sampled", SAMPLED)] + [(f"logprobs {i}", r) for i, r in enumerate(LOGPROBS)]:
    chained_before = metric(metrics(gpu), "cmfx_decode_chained_tokens_total") or 0
    st, dev_lp[name] = post(gpu, path, body)
    check(f"gpu {name} request: 200", st == 200, dev_lp[name])
    check(f"gpu /metrics: the {name} decode chained on the device",
          (metric(metrics(gpu), "cmfx_decode_chained_tokens_total") or 0) > chained_before)
gpu.kill()
host = start("gpu-host-sampling", "--backend", "vulkan", "--gemm", "f32", "--sampling", "host")
for name, (path, body) in [("sampled", SAMPLED)] + [(f"logprobs {i}", r) for i, r in enumerate(LOGPROBS)]:
    st, host_j = post(host, path, body)
    dev_j = dev_lp[name]
    check(f"gpu --sampling host {name} request: 200", st == 200, host_j)
    check(f"{name}: on the device == on the host", st == 200 and text_of(dev_j) == text_of(host_j),
          f"{text_of(dev_j)!r} vs {text_of(host_j)!r}")
    if name == "sampled":
        check("sampled: 16 tokens", host_j.get("usage", {}).get("completion_tokens") == 16, host_j.get("usage"))
    else:
        lp_dev, lp_host = dev_j["choices"][0].get("logprobs"), host_j["choices"][0].get("logprobs")
        check(f"{name}: logprobs present", bool(lp_dev) and bool(lp_host), (lp_dev, lp_host))
        check(f"{name}: the device's logprobs == the host's", lp_dev == lp_host, (lp_dev, lp_host))
host.kill()

# The expert cache: the smallest budget `cmfx run` accepts, plus a little.
r = subprocess.run([CMFX, "run", MODEL, "--backend", "vulkan", "--raw-ids", "1 2", "--prefill-chunk", "512",
                    "--vram-budget", "1"], capture_output=True, text=True, timeout=300)
mn = re.search(r"at least (\d+) bytes", r.stderr)
check("--vram-budget 1 names the minimum", mn is not None, r.stderr[-300:])
if mn:
    # --prefill-chunk 512 as that `cmfx run` (the chunk's scratch and the KV ring it sizes count against the budget;
    # with --vram-budget the default chunk is 2048)
    cache = start("gpu-cache", "--backend", "vulkan", "--gemm", "f32", "--prefill-chunk", "512", "--vram-budget",
                  str(int(mn.group(1)) + 4096))
    check("cache server logs its expert cache", "slots per layer" in cache.text(), cache.text()[:400])
    st, j = post(cache, REQS[1][0], REQS[1][1])
    check("cache server: 200", st == 200, j)
    check("cache server: text == CPU text", st == 200 and text_of(j) == text_of(outs["cpu"][1]))
    m = metrics(cache)
    look, hits, moved = (metric(m, "cmfx_expert_cache_" + k) for k in ("lookups_total", "hits_total",
                                                                        "bytes_moved_total"))
    check("cache /metrics: active", metric(m, "cmfx_expert_cache_active") == 1.0, m[-800:])
    check("cache /metrics: lookups > 0, hits <= lookups", look and hits is not None and 0 < look and hits <= look,
          (look, hits))
    check("cache /metrics: bytes moved > 0", (moved or 0) > 0, moved)
    # the chunk metrics exported (this f32 toy's chunks cannot run in passes: they need int8 experts, so they are 0
    # here; the parity cases check the statistics behind them)
    cx, ch = metric(m, "cmfx_expert_cache_chunk_experts_total"), metric(m, "cmfx_expert_cache_chunk_hits_total")
    secs = [metric(m, "cmfx_expert_cache_chunk_" + k + "_seconds_total")
            for k in ("pack", "ring_wait", "routing_wait", "copy_device", "pass_device", "d2d_device")]
    secs += [metric(m, "cmfx_expert_cache_chunk_" + k + "_total") for k in ("prefetched", "prefetch_used")]
    check("cache /metrics: the chunks' experts, hits, seconds and prefetch counts exported",
          cx is not None and ch is not None and all(v is not None for v in secs), (cx, ch, secs))
    cache.kill()
    # --cold-experts cpu: the same budget, the misses that are not hot enough computed on the CPU (only rounding
    # differs from the copies, so the greedy text stays the CPU backend's)
    cold = start("gpu-cold", "--backend", "vulkan", "--gemm", "f32", "--prefill-chunk", "512", "--vram-budget",
                 str(int(mn.group(1)) + 4096), "--cold-experts", "cpu", "--copy-threads", "2")
    st, j = post(cold, REQS[1][0], REQS[1][1])
    check("cold-experts server: 200", st == 200, j)
    check("cold-experts server: text == CPU text", st == 200 and text_of(j) == text_of(outs["cpu"][1]))
    m = metrics(cold)
    cpu_n = metric(m, "cmfx_expert_cache_cpu_experts_total")
    check("cold-experts /metrics: experts computed on the CPU", (cpu_n or 0) > 0, m[-800:])
    cold.kill()

# V4.1: a sampled completion with logprobs chosen on the device, chained (each step's Engram rows staged by the host
# between its two parts; only the id and the logprobs record read back) — the same text and logprobs as a
# --sampling host server over the read-back logits; a greedy one chained on the device whatever --sampling says, as
# V4's greedy requests.
V41 = os.path.join(TMP, "toy-v41-f32.cmf")
subprocess.run([CMFX, "make-toy", "--arch", "v41", "--out", V41, "--quant", "f32", "--tokenizer", TOKENIZER],
               check=True, stdout=subprocess.DEVNULL, timeout=60)
REQ41 = {"sampled": ("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0.9, "top_p": 0.9,
                                          "seed": 5, "ignore_eos": True, "logprobs": 3, "presence_penalty": 0.3}),
         "greedy": ("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True})}
out41 = {}
for how in ("device", "host"):
    s41 = serve_util.Server(CMFX, V41, TMP, "gpu-v41-" + how, "--backend", "vulkan", "--gemm", "f32", "--sampling", how)
    servers.append(s41)
    for kind, req in REQ41.items():
        before = metric(metrics(s41), "cmfx_decode_chained_tokens_total") or 0
        st, out41[how, kind] = post(s41, *req)
        check(f"V4.1 {kind}, --sampling {how}: 200", st == 200, out41[how, kind])
        on_dev = (metric(metrics(s41), "cmfx_decode_chained_tokens_total") or 0) > before
        want = how == "device" or kind == "greedy"
        check(f"V4.1 {kind}, --sampling {how}: " + ("chosen on the device" if want else "on the host"), on_dev == want,
              on_dev)
    s41.kill()
for kind in REQ41:
    a, b = out41["device", kind], out41["host", kind]
    check(f"V4.1 {kind}: on the device == on the host", text_of(a) == text_of(b), f"{text_of(a)!r} vs {text_of(b)!r}")
a, b = out41["device", "sampled"], out41["host", "sampled"]
check("V4.1 sampled: the same logprobs", a["choices"][0].get("logprobs") == b["choices"][0].get("logprobs") and
      bool(a["choices"][0].get("logprobs")), (a["choices"][0].get("logprobs"), b["choices"][0].get("logprobs")))

# V4.1: a prompt longer than the scheduler's pieces is one official prefill on the device too (engine::mark_prefill):
# pieces of 16 (device chunks of 16) against one piece of 512 — the same greedy ids and logprobs within 1e-3 (the
# chunk boundaries differ, so the sums may round differently); unmarked, the later pieces would be stale-key decode
# steps (relative differences ~0.3 on this toy, tests/parity/cases_prompt_cache.cpp).
IDS41 = [(i * 7919) % 120000 + 100 for i in range(300)]
LREQ = {"prompt": IDS41, "max_tokens": 4, "temperature": 0, "logprobs": 3}
lp41 = {}
for pc in ("16", "512"):
    s41 = serve_util.Server(CMFX, V41, TMP, "gpu-v41-pieces-" + pc, "--backend", "vulkan", "--gemm", "f32",
                            "--prefill-chunk", pc)
    servers.append(s41)
    st, j = post(s41, "/v1/completions", LREQ)
    check(f"V4.1 300-token prompt, --prefill-chunk {pc}: 200", st == 200, j)
    lp41[pc] = j["choices"][0].get("logprobs") if st == 200 else None
    s41.kill()
a, b = lp41["16"], lp41["512"]
same_ids = bool(a) and bool(b) and a["tokens"] == b["tokens"]
close = same_ids and all(abs(x - y) <= 1e-3 for x, y in zip(a["token_logprobs"], b["token_logprobs"]))
check("V4.1 300-token prompt in pieces of 16 == one piece (one prefill either way)", close, (a, b))

bad = subprocess.run([CMFX, "serve", MODEL, "--backend", "vulkan", "--parallel", "2", "--port", "0"],
                     capture_output=True, text=True, timeout=120)
check("--backend vulkan --parallel 2: exit 2", bad.returncode == 2, bad.returncode)
check("... naming --parallel", "--parallel" in bad.stderr, bad.stderr[-300:])
bad = subprocess.run([CMFX, "serve", MODEL, "--vram-budget", "1G", "--port", "0"], capture_output=True, text=True,
                     timeout=120)
check("--vram-budget on the CPU backend: exit 2", bad.returncode == 2, bad.returncode)
finish()
