#!/usr/bin/env python3
"""Builds the tiny-ladder prose corpus from Debian documentation packages.

Sources (Debian main): kernel Documentation/ from linux-source-6.1 and the Python
reference from python3.11-doc. Markup, code blocks, tables and licence text are
removed, paragraphs are de-duplicated across the whole corpus, and documents are
split train/validation/test by a seeded hash of their path, so no document is in
two splits.

Output: WORK/corpus/{train,validation,test}.jsonl, one {"source", "text"} a line,
and WORK/corpus/stats.json.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata

KERNEL_TARBALL = "/usr/src/linux-source-6.1.tar.xz"
PYDOC_SOURCES = "/usr/share/doc/python3.11/html/_sources"

# Directives whose indented body is prose worth keeping (admonitions, API entries).
KEEP_BODY = {
    "note", "warning", "tip", "important", "attention", "caution", "hint", "danger",
    "seealso", "admonition", "versionadded", "versionchanged", "deprecated",
    "function", "method", "class", "attribute", "data", "exception", "module",
    "describe", "decorator", "classmethod", "staticmethod", "coroutinefunction",
    "coroutinemethod", "abstractmethod", "opcode", "envvar", "cmdoption", "option",
    "impl-detail", "topic", "sidebar", "rubric", "glossary", "c:function", "c:macro",
    "c:type", "c:member", "c:var", "c:struct",
}

LICENCE = re.compile(
    r"SPDX-License|copyright|permission is hereby granted|"
    r"general public license|THE SOFTWARE IS PROVIDED|warrant|licen[cs]e[ds]? under|"
    r"redistribut|free software foundation|all rights reserved", re.I)

BORDER = re.compile(r"^\s*[=\-~^*+#_`:.'\"|]{3,}[\s=\-~^*+#_`:.'\"|]*$")
BULLET = re.compile(r"^\s*([-*+•]|\d+[.)]|[a-zA-Z][.)]|#\.)\s+")


def inline(text):
    """Strips reStructuredText inline markup, keeping the visible words."""
    text = re.sub(r":[\w:+.-]+:`~?!?([^`<]*?)\s*<[^`>]*>`", r"\1", text)
    text = re.sub(r":[\w:+.-]+:`~?!?([^`]*)`", r"\1", text)
    text = re.sub(r"`([^`<]+?)\s*<[^`>]+>`__?", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`]+)`_{0,2}", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", text)
    text = re.sub(r"\|([\w -]+)\|_?", r"\1", text)
    text = re.sub(r"\[#?\w*\]_", "", text)
    text = re.sub(r"(\w)_\b", r"\1", text)
    text = re.sub(r"\\([^\\])", r"\1", text)
    return text


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def strip_blocks(lines):
    """Removes directive bodies, literal blocks and tables; dedents kept bodies."""
    out = []
    i, n = 0, len(lines)
    while i < n:
        line = lines[i].replace("\t", "        ").rstrip()
        s = line.strip()
        ind = indent_of(line)
        m = re.match(r"^\.\.\s+([\w:-]+)::(.*)$", s)
        if s.startswith("..") and (m or s == ".." or re.match(r"^\.\.\s", s)):
            keep = m is not None and m.group(1) in KEEP_BODY
            if keep and m.group(1) in ("note", "warning", "tip", "important", "seealso",
                                      "attention", "caution", "hint", "danger",
                                      "deprecated", "versionadded", "versionchanged"):
                rest = m.group(2).strip()
                if rest and m.group(1) not in ("versionadded", "versionchanged", "deprecated"):
                    out.append(rest)
            i += 1
            # Directive options (":maxdepth: 2") and the body are indented deeper.
            while i < n and (not lines[i].strip() or indent_of(lines[i].replace("\t", "        ")) > ind):
                body = lines[i].replace("\t", "        ").rstrip()
                if keep and not re.match(r"^\s*:[\w-]+:", body):
                    out.append(body.strip() if body.strip() else "")
                i += 1
            out.append("")
            continue
        if s.endswith("::"):
            # Literal block follows: keep the paragraph text, drop the code.
            text = line[:-2].rstrip()
            if text.strip():
                out.append(text + ":" if not text.endswith(":") else text)
            i += 1
            while i < n and not lines[i].strip():
                i += 1
            while i < n and (not lines[i].strip() or indent_of(lines[i].replace("\t", "        ")) > ind):
                i += 1
            out.append("")
            continue
        if s.startswith(">>>") or s.startswith("$ ") or s.startswith("# "):
            i += 1
            continue
        if s.startswith("+-") or s.startswith("|") or (s.startswith("+=")):
            i += 1
            continue
        if BORDER.match(line):
            out.append("")
            i += 1
            continue
        out.append(line)
        i += 1
    return out


def paragraphs(lines):
    """Joins wrapped lines into paragraphs; list items start new lines."""
    paras, cur = [], []
    for line in lines:
        if not line.strip():
            if cur:
                paras.append(cur)
            cur = []
            continue
        cur.append(line)
    if cur:
        paras.append(cur)
    result = []
    for p in paras:
        base = min(indent_of(x) for x in p)
        if base >= 4 and not BULLET.match(p[0]):
            continue  # indented block without marker: code or a quoted table
        items, item = [], []
        for x in p:
            if BULLET.match(x) and item:
                items.append(item)
                item = []
            item.append(x.strip())
        if item:
            items.append(item)
        result.append("\n".join(" ".join(it) for it in items))
    return result


def looks_like_prose(p):
    if len(p) < 40 or LICENCE.search(p):
        return False
    words = p.split()
    if len(words) < 8:
        return False
    nonspace = [c for c in p if not c.isspace()]
    letters = sum(c.isalpha() for c in nonspace)
    if letters < 0.75 * len(nonspace):
        return False
    if sum(ord(c) > 127 for c in p) > 0.02 * len(p):
        return False  # translations and drawings
    code = sum(p.count(c) for c in "{}[];=<>\\$@&#|")
    if code > 0.02 * len(p):
        return False
    if not re.search(r"[a-z]{2,}[.!?:](\s|$)", p):
        return False
    if sum(len(w) for w in words) / len(words) > 9:
        return False
    return True


def clean_document(raw):
    raw = unicodedata.normalize("NFC", raw)
    raw = re.sub(r"(?m)^\s*\.\.\s*SPDX-License-Identifier.*$", "", raw)
    lines = strip_blocks(raw.split("\n"))
    out = []
    for p in paragraphs(lines):
        p = inline(p)
        p = re.sub(r"[ \t]+", " ", p).strip()
        if looks_like_prose(p):
            out.append(p)
    return out


def kernel_docs(workdir):
    root = os.path.join(workdir, "src", "linux-source-6.1", "Documentation")
    if not os.path.isdir(root):
        os.makedirs(os.path.join(workdir, "src"), exist_ok=True)
        subprocess.run(["tar", "-xJf", KERNEL_TARBALL, "-C", os.path.join(workdir, "src"),
                        "--wildcards", "linux-source-6.1/Documentation/*"], check=True)
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("translations", "devicetree",
                                                             "ABI", "sphinx", "output"))
        for f in sorted(files):
            if f.endswith(".rst") or f.endswith(".txt") or "." not in f:
                path = os.path.join(dirpath, f)
                yield "linux/" + os.path.relpath(path, root), path


def python_docs():
    for dirpath, dirnames, files in os.walk(PYDOC_SOURCES):
        dirnames.sort()
        for f in sorted(files):
            if f.endswith(".txt"):
                path = os.path.join(dirpath, f)
                yield "python/" + os.path.relpath(path, PYDOC_SOURCES), path


def split_of(source, seed, val_frac, test_frac):
    h = int(hashlib.sha256(f"{seed}:{source}".encode()).hexdigest()[:8], 16) / 2**32
    if h < test_frac:
        return "test"
    if h < test_frac + val_frac:
        return "validation"
    return "train"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default=os.path.join(os.path.dirname(__file__), "work"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--val-frac", type=float, default=0.02)
    ap.add_argument("--test-frac", type=float, default=0.02)
    args = ap.parse_args()

    outdir = os.path.join(args.work, "corpus")
    os.makedirs(outdir, exist_ok=True)
    for need in (KERNEL_TARBALL, PYDOC_SOURCES):
        if not os.path.exists(need):
            sys.exit(f"corpus: {need} is missing; install linux-source-6.1 and python3.11-doc")

    seen = set()
    splits = {"train": [], "validation": [], "test": []}
    stats = {"documents_read": 0, "paragraphs_kept": 0, "paragraphs_duplicate": 0,
             "bytes": {}, "documents": {}, "by_source": {}}
    for source, path in list(kernel_docs(args.work)) + list(python_docs()):
        stats["documents_read"] += 1
        with open(path, encoding="utf-8", errors="replace") as fh:
            raw = fh.read()
        kept = []
        for p in clean_document(raw):
            key = hashlib.sha1(re.sub(r"\W+", " ", p.lower()).encode()).digest()
            if key in seen:
                stats["paragraphs_duplicate"] += 1
                continue
            seen.add(key)
            kept.append(p)
        text = "\n\n".join(kept)
        if len(text) < 200:
            continue
        stats["paragraphs_kept"] += len(kept)
        split = split_of(source, args.seed, args.val_frac, args.test_frac)
        splits[split].append({"source": source, "text": text})
        family = source.split("/")[0]
        stats["by_source"][family] = stats["by_source"].get(family, 0) + len(text.encode())

    for name, docs in splits.items():
        with open(os.path.join(outdir, name + ".jsonl"), "w", encoding="utf-8") as fh:
            for d in docs:
                fh.write(json.dumps(d, ensure_ascii=False) + "\n")
        stats["documents"][name] = len(docs)
        stats["bytes"][name] = sum(len(d["text"].encode()) for d in docs)
    with open(os.path.join(outdir, "stats.json"), "w") as fh:
        json.dump(stats, fh, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
