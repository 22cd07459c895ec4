#!/usr/bin/env python3
"""Trains our own byte-level BPE tokenizer with Hugging Face `tokenizers` and writes
testdata/tokenizer/ours/tokenizer.json, plus small variants that exercise the parts of
the format the real files do not (testdata/tokenizer/variants/*.json).

Ours mirrors MiniMax-M2's layout (docs/MODEL_SPEC.md): 256 byte symbols + merges, the
GPT-4o (o200k) split regex, then the special tokens after the vocab. Training text
comes from make_corpus.py with a different seed than the test corpus.

Usage: pip install tokenizers==0.23.3; python3 tools/tokenizer/train_ours.py
"""
import json
import os
import subprocess
import sys
import tempfile

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "testdata", "tokenizer")

# tiktoken's o200k_base pattern (GPT-4o), as MiniMax-M2 uses.
O200K = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

# MiniMax-M2's known special tokens (ids 200000+ there), then a few of our own.
SPECIALS = ["]!p~[", "]~b]", "[e~[", "]!d~[", "]~!b[", "<think>", "</think>", "<minimax:tool_call>",
            "</minimax:tool_call>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<jupyter_code>"]


def train(text_path, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([text_path], trainer)
    return tok


def main():
    os.makedirs(os.path.join(OUT, "ours"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "variants"), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "train.txt")
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "make_corpus.py"), "--train-text", text],
                       check=True)
        ours = train(text, 12000)
        ours.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
        ours.save(os.path.join(OUT, "ours", "tokenizer.json"))
        small = train(text, 1200)

    base = json.loads(small.to_str())

    # Variant a: GPT-2 style (ByteLevel regex + prefix space), NFKC, and added tokens with
    # every flag; merges written in the old "a b" form.
    a = json.loads(json.dumps(base))
    a["normalizer"] = {"type": "NFKC"}
    a["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    a["model"]["merges"] = [" ".join(m) for m in a["model"]["merges"]]
    tok_a = Tokenizer.from_str(json.dumps(a))
    tok_a.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False),
                              AddedToken("<sep>", special=True, rstrip=True, normalized=False),
                              AddedToken("]~b]", special=True, normalized=False),
                              AddedToken("[e~[", special=True, normalized=False)])
    tok_a.add_tokens([AddedToken("ﬁne-tune", normalized=True),        # matched after NFKC: "fine-tune"
                      AddedToken("dog", single_word=True, normalized=False),
                      AddedToken("||", normalized=False, lstrip=True, rstrip=True),
                      AddedToken("数据", normalized=True),
                      AddedToken("é", normalized=False)])             # decodes as byte 0xE9 in HF
    tok_a.save(os.path.join(OUT, "variants", "a.json"))

    # Variant b: the other Split behaviours, ignore_merges, Lowercase + Replace + Prepend.
    b = json.loads(json.dumps(base))
    b["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "``"}, "content": "\""},
        {"type": "Replace", "pattern": {"Regex": "\\s{3,}"}, "content": "   "},
        {"type": "Lowercase"}]}
    b["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Contiguous", "invert": False},
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[.,;:!?]"}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    b["model"]["ignore_merges"] = True
    tok_b = Tokenizer.from_str(json.dumps(b))
    tok_b.add_special_tokens([AddedToken("<think>", special=True, normalized=False)])
    tok_b.add_tokens([AddedToken("HELLO", normalized=True)])  # normalized: matches "hello" after Lowercase
    tok_b.save(os.path.join(OUT, "variants", "b.json"))

    # Variant c: o200k regex with Removed+invert (tiktoken conversions) and a Split on a
    # literal string with MergedWithPrevious after it; NFC.
    c = json.loads(json.dumps(base))
    c["normalizer"] = {"type": "NFC"}
    c["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": O200K}, "behavior": "Removed", "invert": True},
        {"type": "Split", "pattern": {"String": "'"}, "behavior": "MergedWithPrevious", "invert": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False}]}
    tok_c = Tokenizer.from_str(json.dumps(c))
    tok_c.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS[:9]])
    tok_c.save(os.path.join(OUT, "variants", "c.json"))
    print("wrote", os.path.join(OUT, "ours", "tokenizer.json"), "and variants a, b, c", file=sys.stderr)


if __name__ == "__main__":
    main()
