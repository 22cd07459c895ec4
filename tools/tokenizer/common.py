"""Shared by the tokenizer tools: where the test tokenizers are, and the id hash."""
import io
import json
import os
import struct
import tarfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "testdata", "tokenizer")
CORPUS = os.path.join(DATA, "corpus")

# name -> file, relative to testdata/tokenizer. A .tar.xz holds <name>/tokenizer.json.
TOKENIZERS = {
    "ours": "ours/tokenizer.json",
    "variant_a": "variants/a.json",
    "variant_b": "variants/b.json",
    "variant_c": "variants/c.json",
    "olmo2": "third_party/olmo2.tar.xz",
    "deepseek_v3": "third_party/deepseek_v3.tar.xz",
    "claude": "third_party/claude.tar.xz",
}


def tokenizer_json(name_or_path):
    """The tokenizer.json text of a test tokenizer name, or of a path."""
    path = os.path.join(DATA, TOKENIZERS[name_or_path]) if name_or_path in TOKENIZERS else name_or_path
    if path.endswith(".tar.xz"):
        with tarfile.open(path) as tar:
            member = next(m for m in tar.getnames() if m.endswith("tokenizer.json"))
            return tar.extractfile(member).read().decode("utf-8")
    return open(path, encoding="utf-8").read()


def load_hf(name_or_path):
    from tokenizers import Tokenizer
    return Tokenizer.from_str(tokenizer_json(name_or_path))


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def ids_hash(ids) -> str:
    """FNV-1a 64 of the ids as little-endian uint32 (tests/text computes the same)."""
    return fnv1a64(struct.pack(f"<{len(ids)}I", *ids))


def corpus_docs():
    return sorted(f for f in os.listdir(CORPUS) if f.endswith(".txt"))


def read_doc(name) -> str:
    """A corpus document as HF sees it: invalid UTF-8 replaced per maximal subpart,
    the policy the engine implements (src/text/utf8.h)."""
    return open(os.path.join(CORPUS, name), "rb").read().decode("utf-8", "replace")
