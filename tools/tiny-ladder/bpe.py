#!/usr/bin/env python3
"""Byte-level BPE for the tiny ladder: a trainer and a reference encoder.

Same scheme as Qwen2: NFC, the Qwen2 pre-tokenizer regex, GPT-2 byte-to-unicode
alphabet, merges applied by rank. Saved as a Hugging Face tokenizer.json (model
BPE with vocab + merges) so that HF `tokenizers` and molt's C++ tokenizer load it.

Training counts unique pre-tokenized words once, then keeps pair counts and a
pair -> words index up to date per merge, so each merge touches only the words
that contain the pair.
"""
import argparse
import heapq
import json
import os
import unicodedata
from collections import Counter, defaultdict

import regex

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table, in its id order."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return list(zip(bs, [chr(c) for c in cs]))


PATTERN = regex.compile(QWEN2_PATTERN)


def pretokenize(text):
    return PATTERN.findall(unicodedata.normalize("NFC", text))


def train(texts, vocab_size, log=print):
    table = bytes_to_unicode()
    byte_char = dict(table)
    words = Counter()
    for t in texts:
        words.update(pretokenize(t))
    log(f"bpe: {sum(words.values())} pre-tokens, {len(words)} unique")

    id_to_str = [c for _, c in table]
    str_to_id = {s: i for i, s in enumerate(id_to_str)}
    byte_id = {b: str_to_id[c] for b, c in byte_char.items()}
    seqs = [[byte_id[b] for b in w.encode("utf-8")] for w in words]
    counts = list(words.values())

    pair_count = defaultdict(int)
    where = defaultdict(set)
    for wi, s in enumerate(seqs):
        c = counts[wi]
        for a, b in zip(s, s[1:]):
            pair_count[(a, b)] += c
            where[(a, b)].add(wi)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    target = vocab_size - len(SPECIALS)
    while len(id_to_str) < target and heap:
        negc, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -negc or negc == 0:
            continue  # stale entry
        a, b = pair
        new_str = id_to_str[a] + id_to_str[b]
        new_id = str_to_id.get(new_str)
        if new_id is None:  # a string reachable by two merges keeps one id (as HF does)
            new_id = len(id_to_str)
            id_to_str.append(new_str)
            str_to_id[new_str] = new_id
        merges.append((a, b))
        touched = set()
        for wi in list(where[pair]):
            s, c = seqs[wi], counts[wi]
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            for p in zip(s, s[1:]):
                pair_count[p] -= c
                touched.add(p)
            for p in zip(out, out[1:]):
                pair_count[p] += c
                where[p].add(wi)
                touched.add(p)
            seqs[wi] = out
        del where[pair]
        pair_count.pop(pair, None)
        for p in touched:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, p))
            elif p in pair_count:
                del pair_count[p]
        if len(merges) % 500 == 0:
            log(f"bpe: {len(merges)} merges, vocab {len(id_to_str)}")
    return id_to_str, [(id_to_str[a], id_to_str[b]) for a, b in merges]


def tokenizer_json(id_to_str, merges):
    vocab = {s: i for i, s in enumerate(id_to_str)}
    base = len(id_to_str)
    added = [{"id": base + k, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for k, s in enumerate(SPECIALS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated",
             "invert": False},
            byte_level]},
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


def tokenizer_config(base):
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(base + k): {"content": s, "lstrip": False, "normalized": False,
                            "rstrip": False, "single_word": False, "special": True}
            for k, s in enumerate(SPECIALS)},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 2048,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


class Tokenizer:
    """Reference encoder/decoder for a tokenizer.json written by this file."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as fh:
            tj = json.load(fh)
        self.vocab = tj["model"]["vocab"]
        self.id_to_str = {i: s for s, i in self.vocab.items()}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(tj["model"]["merges"])}
        self.specials = {t["content"]: t["id"] for t in tj["added_tokens"]}
        for s, i in self.specials.items():
            self.id_to_str[i] = s
        self.byte_char = dict(bytes_to_unicode())
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        self.special_re = regex.compile("(" + "|".join(regex.escape(s) for s in self.specials) + ")")
        self.cache = {}
        self.n_vocab = max(self.id_to_str) + 1
        self.eot = self.specials["<|endoftext|>"]
        self.lengths = {i: (len(s.encode()) if s in self.specials else len(s))
                        for i, s in self.id_to_str.items()}

    def token_bytes(self, i):
        return self.lengths[i]

    def _bpe(self, word):
        parts = [self.byte_char[b] for b in word.encode("utf-8")]
        while len(parts) > 1:
            best, best_rank = None, None
            for i in range(len(parts) - 1):
                r = self.ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best is None:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [self.vocab[p] for p in parts]

    def encode(self, text):
        ids = []
        for k, piece in enumerate(self.special_re.split(text)):
            if k % 2 == 1:
                ids.append(self.specials[piece])
                continue
            for w in pretokenize(piece):
                got = self.cache.get(w)
                if got is None:
                    got = self._bpe(w)
                    if len(self.cache) < 2_000_000:
                        self.cache[w] = got
                ids.extend(got)
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            s = self.id_to_str[int(i)]
            if s in self.specials:
                out.extend(s.encode())
            else:
                out.extend(self.char_byte[c] for c in s)
        return out.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--work", default=os.path.join(here, "work"))
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=0, help="train on a prefix only (0: all)")
    args = ap.parse_args()

    texts, total = [], 0
    with open(os.path.join(args.work, "corpus", "train.jsonl"), encoding="utf-8") as fh:
        for line in fh:
            t = json.loads(line)["text"]
            texts.append(t)
            total += len(t)
            if args.max_bytes and total >= args.max_bytes:
                break
    # The synthetic episodes use digits, names and ChatML words: let BPE see a sample.
    from episodes import tokenizer_sample
    texts.extend(tokenizer_sample(seed=7, count=3000))
    id_to_str, merges = train(texts, args.vocab_size)
    outdir = os.path.join(args.work, "tokenizer")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "tokenizer.json"), "w", encoding="utf-8") as fh:
        json.dump(tokenizer_json(id_to_str, merges), fh, ensure_ascii=False, indent=1)
    with open(os.path.join(outdir, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
        json.dump(tokenizer_config(len(id_to_str)), fh, indent=2)
    print(f"bpe: vocab {len(id_to_str)} + {len(SPECIALS)} specials, {len(merges)} merges "
          f"-> {outdir}")


if __name__ == "__main__":
    main()
