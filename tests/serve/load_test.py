#!/usr/bin/env python3
"""Bounded concurrent load on `cmfx serve` (CTest label `serve`), Python standard library only.

usage: load_test.py CMFX TOKENIZER_JSON TMPDIR

32 client threads send 500 streaming chat/completions requests in total (max_tokens 8) to one server on 127.0.0.1
(--parallel 4, queue large enough for every client). Every request must end with 200, a usage chunk and [DONE]
(zero failures), and each seeded request of a sample must give the text it gives when served alone (sequential
requests before the load). Exit 0 pass, 1 fail, 77 skip (tokenizer missing and CI is not set).
"""
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, make_toy, require_tokenizer  # noqa: E402

CMFX, TOKENIZER, TMP = sys.argv[1], sys.argv[2], sys.argv[3]
require_tokenizer(TOKENIZER, "load_test")
MODEL = make_toy(CMFX, TOKENIZER, TMP)

CLIENTS, TOTAL, MAX_TOKENS, SAMPLE = 32, 500, 8, 24
T0 = time.time()


def body(i):
    # thinking off so the text is in content; seeded, varied prompts
    return {"model": "toy", "messages": [{"role": "user", "content": f"load request {i % 37} about item {i}"}],
            "max_tokens": MAX_TOKENS, "seed": 1000 + i, "temperature": 0.8, "stream": True,
            "stream_options": {"include_usage": True}, "thinking": {"type": "disabled"}}


def stream(port, req, timeout=60):
    """One streaming request; returns (text, error string or None)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(req).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return None, f"status {r.status}: {r.read()[:300]!r}"
        text, usage, done = [], None, False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            ev = line[6:]
            if ev == "[DONE]":
                done = True
                break
            j = json.loads(ev)
            if "error" in j:
                return None, f"error event {j}"
            if j["choices"]:
                text.append(j["choices"][0]["delta"].get("content") or "")
            if j.get("usage"):
                usage = j["usage"]
        if not done:
            return None, "no [DONE]"
        if not usage or usage["completion_tokens"] > MAX_TOKENS or usage["completion_tokens"] < 1:
            return None, f"bad usage {usage}"
        return "".join(text), None
    except Exception as e:  # noqa: BLE001 - every client-side failure counts
        return None, f"exception {type(e).__name__}: {e}"
    finally:
        c.close()


srv = None
failures = []
try:
    srv = Server(CMFX, MODEL, TMP, "load", "--parallel", "4", "--queue", str(CLIENTS + 8), "--ctx", "512")
    sample = list(range(0, TOTAL, TOTAL // SAMPLE))[:SAMPLE]
    alone = {}
    for i in sample:
        text, err = stream(srv.port, body(i))
        if err:
            failures.append(f"alone {i}: {err}")
        alone[i] = text
    t_alone = time.time() - T0

    results = [None] * TOTAL
    errors = [None] * TOTAL
    next_i = [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next_i[0]
                if i >= TOTAL:
                    return
                next_i[0] += 1
            results[i], errors[i] = stream(srv.port, body(i))

    t1 = time.time()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, 120 - (time.time() - t1)))
    t_load = time.time() - t1
    if any(t.is_alive() for t in threads):
        failures.append("clients still running after 120 s")
    bad = [(i, e) for i, e in enumerate(errors) if e]
    unfinished = [i for i in range(TOTAL) if results[i] is None and not errors[i]]
    for i, e in bad[:10]:
        print(f"FAIL request {i}: {e}")
    if bad or unfinished:
        failures.append(f"{len(bad)} failed, {len(unfinished)} unfinished of {TOTAL}")
    else:
        print(f"ok   {TOTAL} streaming requests from {CLIENTS} clients, zero failures ({t_load:.1f} s, "
              f"{TOTAL / t_load:.1f} req/s)")
    mism = [i for i in sample if results[i] != alone[i]]
    for i in mism[:5]:
        print(f"FAIL request {i} under load {results[i]!r} != alone {alone[i]!r}")
    if mism:
        failures.append(f"{len(mism)} of {len(sample)} sampled outputs differ under load")
    else:
        print(f"ok   {len(sample)} seeded requests: output under load == served alone")
    distinct = len({results[i] for i in sample})
    if distinct < len(sample) // 2:
        failures.append(f"sampled outputs hardly differ ({distinct} distinct): the comparison proves little")
    if not srv.alive():
        failures.append("server exited")
    print(f"load_test: alone {t_alone:.1f} s, load {t_load:.1f} s")
except Exception as e:  # noqa: BLE001
    import traceback
    traceback.print_exc()
    failures.append(f"exception: {e}")
    if srv:
        print(srv.text()[-3000:])
finally:
    if srv:
        srv.kill()

for f in failures:
    print("FAIL " + f)
print(f"load_test: {len(failures)} failure(s), {time.time() - T0:.1f} s")
sys.exit(1 if failures else 0)
