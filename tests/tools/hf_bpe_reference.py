#!/usr/bin/env python3
"""Reference byte-level BPE over a Hugging Face tokenizer.json, written independently of
Atoll's C++ (algorithms/data/hf_tokenizer.*): the split pattern runs through the `regex`
module (which knows \\p{L} and \\p{N}), merges follow the original GPT-2 encoder loop (merge every
occurrence of the lowest-ranked pair, left to right).

usage: hf_bpe_reference.py TOKENIZER_JSON TEXTS_JSON
TEXTS_JSON is a list of strings; prints a JSON list of {"ids": [...], "pieces": [...]}, one per
text, where pieces are the pre-tokenizer's pieces of the text outside added tokens.
"""
import json
import sys
import unicodedata

import regex

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    """GPT-2's table: printable Latin-1 bytes map to themselves, the rest to U+0100 onwards."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def split_pattern(pre):
    if pre["type"] == "ByteLevel":
        return GPT2_PATTERN
    assert pre["type"] == "Sequence", pre
    split = pre["pretokenizers"][0]
    assert split["type"] == "Split" and split["behavior"] == "Isolated", split
    return split["pattern"]["Regex"]


class Reference:
    def __init__(self, spec):
        model = spec["model"]
        self.vocab = model["vocab"]
        self.ignore_merges = bool(model.get("ignore_merges", False))
        self.ranks = {}
        for rank, m in enumerate(model["merges"]):
            pair = tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
            self.ranks.setdefault(pair, rank)
        self.nfc = (spec.get("normalizer") or {}).get("type") == "NFC"
        self.pattern = regex.compile(split_pattern(spec["pre_tokenizer"]))
        self.byte_encoder = bytes_to_unicode()
        added = sorted((a["content"] for a in spec.get("added_tokens") or []), key=len, reverse=True)
        self.added_ids = {a["content"]: a["id"] for a in spec.get("added_tokens") or []}
        self.added_re = regex.compile("(" + "|".join(regex.escape(a) for a in added) + ")") if added else None

    def bpe(self, token):
        if self.ignore_merges and token in self.vocab:
            return [token]
        word = list(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, text):
        segments = self.added_re.split(text) if self.added_re else [text]
        ids, pieces = [], []
        for k, seg in enumerate(segments):
            if k % 2 == 1:  # a captured added token
                ids.append(self.added_ids[seg])
                continue
            if self.nfc:
                seg = unicodedata.normalize("NFC", seg)
            for piece in self.pattern.findall(seg):
                pieces.append(piece)
                mapped = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
                ids.extend(self.vocab[t] for t in self.bpe(mapped))
        return {"ids": ids, "pieces": pieces}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        ref = Reference(json.load(f))
    with open(sys.argv[2], encoding="utf-8") as f:
        texts = json.load(f)
    json.dump([ref.encode(t) for t in texts], sys.stdout)


if __name__ == "__main__":
    main()
