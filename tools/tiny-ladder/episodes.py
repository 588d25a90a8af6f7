#!/usr/bin/env python3
"""Synthetic episodes that teach the tiny ladder to copy specifics from far back.

Kinds (each returns token ids plus a mask of the tokens that can only be predicted
by copying from earlier context, used for accuracy):
- copy:   "repeat this random string" in several formats, plain and ChatML;
- dense:  many facts then many questions about them (multi-query recall);
- needle: facts planted in prose at random positions, asked at the end, plain
          and ChatML, varied templates, entities and digit strings.
Every generator takes a random.Random so a fixed seed gives fixed data.
"""
import argparse
import json
import os
import random
import string

NAMES = ("Alice Bruno Clara Dmitri Elena Farid Greta Hugo Ines Jonas Keiko Liam Maya Nadia "
         "Oscar Priya Quentin Rosa Samir Tara Ulrich Vera Wendell Xenia Yusuf Zoe Arthur "
         "Beatrix Carlos Daphne Emil Fiona Gustav Helena Ivan Julia Kofi Lena Marco Nora "
         "Pablo Rita Stefan Tomas Ursula Viktor Willa Anton Sofia").split()
PLACES = ("north gate|south tower|east wing|west door|main vault|old library|server room|"
          "back office|river dock|garden shed|front desk|lower garage|upper lab|city archive|"
          "clock tower|boat house|fire station|museum hall|ward seven|supply depot").split("|")
OBJECTS = ("red notebook|spare key|brass lamp|blue folder|old camera|first aid kit|silver coin|"
           "map of the coast|violin case|wooden chest|green umbrella|laptop charger|tool box|"
           "glass jar|chess set|paper lantern|black suitcase|radio|telescope|yellow helmet").split("|")
CITIES = ("Lisbon Oslo Kyoto Denver Nairobi Lima Dublin Quebec Hanoi Porto Vienna Bergen "
          "Tunis Cairo Austin Perth Turin Riga Zagreb Malmo Leeds Seville Krakow Bogota").split()
COLOURS = "red blue green yellow purple orange black white silver golden brown pink grey teal".split()
JOBS = ("baker pilot nurse carpenter teacher chemist lawyer farmer plumber librarian painter "
        "surgeon sailor tailor jeweller architect").split()
ANIMALS = "dog cat parrot rabbit horse goat turtle hamster".split()
PETNAMES = ("Biscuit Pepper Shadow Mango Pixel Waffle Comet Juniper Noodle Ziggy Clover Bandit "
            "Marble Pickle Rocket Sable").split()
SYSTEMS = ("mail server|billing system|wifi network|staff portal|backup drive|alarm panel|"
           "build machine|guest account").split("|")
DEVICES = ("printer|router|scanner|projector|generator|freezer|pump|drone|microscope").split("|")
WORDS = ("apple river stone cloud maple ember falcon harbor meadow copper lantern orbit pebble "
         "quartz raven saffron thistle velvet willow zephyr cobalt dune fern glacier hazel iris "
         "juniper kestrel lotus marble nectar onyx prism quill rustic sparrow tundra umber "
         "vortex walnut").split()


def digits(rng, lo=3, hi=6):
    return "".join(rng.choice(string.digits) for _ in range(rng.randint(lo, hi)))


def alnum(rng):
    return (rng.choice(string.ascii_uppercase) + rng.choice(string.ascii_uppercase) + "-" +
            digits(rng, 3, 5))


# (key kind, statement, question, answer kind)
RELATIONS = [
    ("place", "The access code for the {k} is {a}.", "What is the access code for the {k}?", "num"),
    ("object", "The {k} is kept in locker {a}.", "In which locker is the {k} kept?", "num"),
    ("name", "{k}'s favourite colour is {a}.", "What is {k}'s favourite colour?", "colour"),
    ("name", "{k} lives in {a}.", "Where does {k} live?", "city"),
    ("system", "The password for the {k} is {a}.", "What is the password for the {k}?", "word"),
    ("name", "The meeting with {k} is in room {a}.", "In which room is the meeting with {k}?", "num"),
    ("name", "{k} has a pet called {a}.", "What is the name of {k}'s pet?", "pet"),
    ("device", "The serial number of the {k} is {a}.", "What is the serial number of the {k}?", "serial"),
    ("city", "The train to {k} leaves from platform {a}.", "Which platform does the train to {k} leave from?", "small"),
    ("name", "{k} works as a {a}.", "What does {k} work as?", "job"),
    ("name", "The secret number of {k} is {a}.", "What is the secret number of {k}?", "num"),
    ("place", "The {k} opens at {a} o'clock.", "At what time does the {k} open?", "small"),
]
KEYS = {"place": PLACES, "object": OBJECTS, "name": NAMES, "system": SYSTEMS, "device": DEVICES,
        "city": CITIES}


def answer(rng, kind):
    if kind == "num":
        return digits(rng)
    if kind == "small":
        return str(rng.randint(1, 12))
    if kind == "serial":
        return alnum(rng)
    return rng.choice({"colour": COLOURS, "city": CITIES, "word": WORDS, "pet": PETNAMES,
                       "job": JOBS}[kind])


def make_facts(rng, n):
    """n facts with distinct (relation, key) so every question has one answer."""
    facts, used = [], set()
    while len(facts) < n:
        rel = rng.choice(RELATIONS)
        key = rng.choice(KEYS[rel[0]])
        if (rel[1], key) in used:
            continue
        used.add((rel[1], key))
        a = answer(rng, rel[3])
        facts.append((rel[1].format(k=key, a=a), rel[2].format(k=key), a))
    return facts


def random_string(rng):
    kind = rng.random()
    if kind < 0.3:
        return " ".join(digits(rng, 2, 6) for _ in range(rng.randint(2, 8)))
    if kind < 0.6:
        return " ".join(rng.choice(WORDS + COLOURS + PETNAMES + CITIES)
                        for _ in range(rng.randint(3, 14)))
    if kind < 0.8:
        return "".join(rng.choice(string.ascii_lowercase + string.digits + "-_")
                       for _ in range(rng.randint(8, 40)))
    return " ".join("".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(2, 7)))
                    for _ in range(rng.randint(2, 8)))


def question_block(rng, q, a, chat):
    """Returns (prefix, answer, suffix) text pieces of one question."""
    if chat:
        return (f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n", a, "<|im_end|>\n")
    style = rng.randrange(3)
    if style == 0:
        return (f"Question: {q}\nAnswer:", " " + a, "\n")
    if style == 1:
        return (f"Q: {q}\nA:", " " + a, "\n")
    return (f"{q}\n", a, "\n")


class Episodes:
    def __init__(self, tok, prose_docs):
        self.tok = tok
        self.prose = prose_docs  # list of documents (str), paragraph separated
        self.im_start = tok.specials["<|im_start|>"]
        self.eot = tok.eot
        # Whole-word vocabulary entries: strings of them are mostly unique tokens,
        # the cleanest signal for an induction (copy) head to form on.
        self.vocab_words = sorted(
            w for w in (tok.decode([i]) for i in range(tok.n_vocab) if i not in tok.specials.values())
            if len(w) >= 4 and w[0] == " " and w[1:].isascii() and w[1:].isalpha())

    def encode_pieces(self, pieces):
        """Encodes the joined text; marks tokens inside pieces flagged as targets.

        The text is encoded whole (as an evaluator would), and target spans are
        found by byte offsets, so no token boundary is forced by the split.
        """
        text = "".join(p for p, _ in pieces)
        spans, pos = [], 0
        for p, is_target in pieces:
            n = len(p.encode("utf-8"))
            if is_target:
                spans.append((pos, pos + n))
            pos += n
        ids = self.tok.encode(text)
        mask, pos = [], 0
        for i in ids:
            n = self.tok.token_bytes(i)
            mask.append(any(s <= pos < e for s, e in spans))
            pos += n
        return ids, mask

    # --- copy -------------------------------------------------------------------------
    def copy_episode(self, rng):
        if rng.random() < 0.5:
            s = "".join(rng.sample(self.vocab_words, rng.randint(6, 30))).strip()
        else:
            s = random_string(rng)
        fmt = rng.randrange(5)
        if fmt == 0:
            pieces = [(f"Repeat this string: {s}\n", False), (s, True), ("\n", False)]
        elif fmt == 1:
            pieces = [(f"Copy: {s}\nCopy:", False), (" " + s, True), ("\n", False)]
        elif fmt == 2:
            pieces = [(f"<|im_start|>user\nRepeat after me: {s}<|im_end|>\n<|im_start|>assistant\n",
                       False), (s, True), ("<|im_end|>\n", False)]
        elif fmt == 3:
            pieces = [(f"{s}\n", False), (s, True), ("\n", False)]
        else:
            pieces = [(f"Input: {s}\nOutput:", False), (" " + s, True), ("\n\n", False)]
        return self.encode_pieces(pieces)

    def pack(self, rng, make, T):
        ids, mask = [], []
        while len(ids) < T:
            i, m = make(rng)
            ids += i + [self.eot]
            mask += m + [False]
        return ids[:T], mask[:T]

    def copy_row(self, rng, T):
        return self.pack(rng, self.copy_episode, T)

    # --- dense recall -------------------------------------------------------------------
    def dense_episode(self, rng, n_facts=None):
        n = n_facts or rng.randint(4, 12)
        facts = make_facts(rng, n)
        chat = rng.random() < 0.25
        pieces = [(rng.choice(["Facts:\n", "Remember these facts.\n", "Notes:\n", ""]), False)]
        for st, _, _ in facts:
            pieces.append((st + "\n", False))
        pieces.append(("\n", False))
        order = facts[:]
        rng.shuffle(order)
        for _, q, a in order[:rng.randint(max(1, n // 2), n)]:
            pre, ans, post = question_block(rng, q, a, chat)
            pieces += [(pre, False), (ans, True), (post, False)]
        return self.encode_pieces(pieces)

    def dense_row(self, rng, T):
        return self.pack(rng, self.dense_episode, T)

    # --- needles in prose ---------------------------------------------------------------
    def filler(self, rng, n_tokens_hint):
        """Consecutive paragraphs from a random document, about n tokens long."""
        paras = []
        budget = int(n_tokens_hint * 4.2)  # ~4 bytes per token on this corpus
        while budget > 0:
            doc = rng.choice(self.prose).split("\n\n")
            i = rng.randrange(len(doc))
            while i < len(doc) and budget > 0:
                paras.append(doc[i])
                budget -= len(doc[i]) + 2
                i += 1
        return paras

    def needle_row(self, rng, T):
        """Prose of T tokens with 1-4 facts planted between paragraphs, asked at the end."""
        n = rng.randint(1, 4)
        chat = rng.random() < 0.3
        facts = make_facts(rng, n)
        asked = facts[:]
        rng.shuffle(asked)
        asked = asked[:rng.randint(1, n)]
        q_pieces = []
        for _, q, a in asked:
            pre, ans, post = question_block(rng, q, a, chat)
            q_pieces += [(pre, False), (ans, True), (post, False)]
        q_ids, q_mask = self.encode_pieces(q_pieces)
        room = T - len(q_ids)
        # Paragraphs counted in tokens, so the facts survive the final trim.
        paras, used = [], 0
        target = room - 14 * n - 4
        while used < target:
            doc = rng.choice(self.prose).split("\n\n")
            i = rng.randrange(len(doc))
            while i < len(doc) and used < target:
                k = len(self.tok.encode(doc[i])) + 1
                paras.append(doc[i])
                used += k
                i += 1
        slots = sorted(rng.randint(1, len(paras)) for _ in facts)
        body = []
        for i, p in enumerate(paras + [None]):
            body += [facts[k][0] for k, s in enumerate(slots) if s == i]
            if p is not None:
                body.append(p)
        lead = "<|im_start|>user\n" if chat else ""
        text_ids = self.tok.encode(lead + "\n\n".join(body) + ("<|im_end|>\n" if chat else "\n\n"))
        if len(text_ids) > room:
            text_ids = text_ids[len(text_ids) - room:]
            kept = self.tok.decode(text_ids)
            if any(st not in kept for st, _, _ in asked):
                return self.needle_row(rng, T)  # rare: a fact was cut; draw again
        ids = text_ids + q_ids
        mask = [False] * len(text_ids) + q_mask
        if len(ids) < T:
            pad_ids, pad_mask = self.copy_row(rng, T - len(ids) - 1)
            ids = ids + [self.eot] + pad_ids
            mask = mask + [False] + pad_mask
        return ids[:T], mask[:T]


def needle_prompt(ep, rng, context_tokens, chat=False):
    """One evaluation needle: a single fact at a random depth, one question.

    Returns dict(prompt, answer, depth) where prompt ends right before the answer.
    """
    facts = make_facts(rng, 1)
    st, q, a = facts[0]
    paras = ep.filler(rng, context_tokens - 30)
    text = "\n\n".join(paras)
    ids = ep.tok.encode(text)[: max(8, context_tokens - 30)]
    text = ep.tok.decode(ids)
    # Plant at a paragraph boundary at a uniform depth.
    cut_points = [0] + [i + 2 for i in range(len(text)) if text.startswith("\n\n", i)]
    depth = rng.random()
    cut = min(cut_points, key=lambda c: abs(c - depth * len(text)))
    body = text[:cut] + st + "\n\n" + text[cut:]
    if chat:
        prompt = f"<|im_start|>user\n{body}\n\n{q}<|im_end|>\n<|im_start|>assistant\n"
        ans = a
    else:
        prompt = f"{body}\n\nQuestion: {q}\nAnswer:"
        ans = " " + a
    return {"prompt": prompt, "answer": ans, "depth": round(cut / max(1, len(text)), 3)}


def tokenizer_sample(seed, count):
    """Plain text of synthetic episodes, for the tokenizer trainer to see."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        facts = make_facts(rng, 3)
        parts = [f for f, _, _ in facts]
        for _, q, a in facts:
            parts.append(f"Question: {q}\nAnswer: {a}")
            parts.append(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>")
        s = random_string(rng)
        parts.append(f"Repeat this string: {s}\n{s}")
        out.append("\n".join(parts))
    return out


def main():
    """Writes the fixed evaluation needle set from the test split."""
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--work", default=os.path.join(here, "work"))
    ap.add_argument("--tokenizer", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=99)
    ap.add_argument("--contexts", default="256,512,700,1024,1536,2048")
    ap.add_argument("--count", type=int, default=50)
    args = ap.parse_args()
    from bpe import Tokenizer
    tok = Tokenizer(args.tokenizer or os.path.join(args.work, "tokenizer", "tokenizer.json"))
    docs = [json.loads(l)["text"] for l in open(os.path.join(args.work, "corpus", "test.jsonl"))]
    ep = Episodes(tok, docs)
    rng = random.Random(args.seed)
    with open(args.out, "w", encoding="utf-8") as fh:
        for n in map(int, args.contexts.split(",")):
            for k in range(args.count):
                item = needle_prompt(ep, rng, n, chat=(k % 4 == 3))
                item["context"] = n
                fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"episodes: wrote {args.out}")


if __name__ == "__main__":
    main()
