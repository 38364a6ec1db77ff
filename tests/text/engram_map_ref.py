#!/usr/bin/python3
"""Reference keys of DeepSeek-V4.1 Engram's compressed token map (spec §4.4) from a tokenizer.json, in plain Python
(unicodedata; no `tokenizers` package). Used by tests/text/engram_map_test.cpp against include/cmfx/text/engram_map.hpp.

The official `build_compressed_token_map` runs Hugging Face `tokenizers` normalizers; their semantics, written here
with unicodedata / explicit rules (see engram_map.hpp for the sources):
  NFKC -> NFD -> drop General_Category M* (StripAccents) -> lowercase each character on its own (Rust
  char::to_lowercase: full mapping, no Final_Sigma context; Python's lower() of ONE character is the same)
  -> "[ \\t\\r\\n]+" -> " " -> a text that is exactly " " becomes U+E000 -> strip White_Space at both ends
  -> U+E000 -> " ".
Decode of one id: the Hugging Face ByteLevel decoder's rule (a token whose characters are all in the byte-level
alphabet becomes those bytes, any other token its UTF-8 text), then from_utf8_lossy; an added token's content
replaces the vocabulary piece of the same id.

Output (stdout): a JSON object {"unidata_version", "ids", "distinct", "keys": [hex of each key's UTF-8],
"unassigned": [code points of the decoded texts that this Python's Unicode does not assign]}.
"""
import json
import re
import sys
import unicodedata

WHITE_SPACE = set(chr(c) for c in [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                   0x2029, 0x202F, 0x205F, 0x3000])
SENTINEL = "\ue000"
RUN = re.compile(r"[ \t\r\n]+")


def byte_alphabet():
    """GPT-2 bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for U+0100 upward."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(0x100 + extra)] = b
            extra += 1
    return chars


def normalize(text):
    s = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    s = "".join(c.lower() for c in s if not unicodedata.category(c).startswith("M"))
    s = RUN.sub(" ", s)
    if s == " ":
        s = SENTINEL
    return s.strip("".join(WHITE_SPACE)).replace(SENTINEL, " ")


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        tj = json.load(f)
    piece = {i: t for t, i in tj["model"]["vocab"].items()}
    for a in tj.get("added_tokens", []):
        piece[a["id"]] = a["content"]
    alphabet = byte_alphabet()
    n = max(piece) + 1
    keys, first, unassigned = [], {}, set()
    for i in range(n):
        p = piece.get(i)
        if p is None:
            raw = b""
        elif all(c in alphabet for c in p):
            raw = bytes(alphabet[c] for c in p)
        else:
            raw = p.encode("utf-8")
        text = raw.decode("utf-8", errors="replace")
        if "\ufffd" in text:
            key = p
        else:
            unassigned.update(ord(c) for c in text if unicodedata.category(c) == "Cn")
            k = normalize(text)
            key = k if k else text
        first.setdefault(key, len(first))
        keys.append(key.encode("utf-8").hex())
    json.dump({"unidata_version": unicodedata.unidata_version, "ids": n, "distinct": len(first), "keys": keys,
               "unassigned": sorted(unassigned)}, sys.stdout)


if __name__ == "__main__":
    main()
