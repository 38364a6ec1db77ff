"""Shared by load_test.py and hostile_test.py: tokenizer skip rule, toy model, a `cmfx serve` on 127.0.0.1."""
import os
import re
import subprocess
import sys
import time


def require_tokenizer(tokenizer, name):
    """Exit 77 (skip) when the tokenizer is missing, or 1 when CI=true."""
    if os.path.isfile(tokenizer):
        return
    msg = f"{name}: tokenizer not found: {tokenizer} (run scripts/tokenizer_cases.sh)"
    if os.environ.get("CI", "").lower() == "true":
        print(msg + "; failing because CI=true")
        sys.exit(1)
    print(msg + "; skipping")
    sys.exit(77)


def make_toy(cmfx, tokenizer, tmp):
    os.makedirs(tmp, exist_ok=True)
    model = os.path.join(tmp, "toy.cmf")
    subprocess.run([cmfx, "make-toy", "--out", model, "--tokenizer", tokenizer], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    return model


class Server:
    def __init__(self, cmfx, model, tmp, name, *flags):
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([cmfx, "serve", model, "--port", "0", *flags], stdout=subprocess.DEVNULL,
                                     stderr=self.log)
        deadline = time.time() + 20
        while time.time() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server {name} did not start: {self.text()}")

    def text(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
