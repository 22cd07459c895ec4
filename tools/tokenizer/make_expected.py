#!/usr/bin/env python3
"""Writes testdata/tokenizer/expected/<tokenizer>.tsv: for every corpus document, the
count and hash of the ids Hugging Face `tokenizers` gives (with special tokens parsed,
and with them as plain text via encode_special_tokens), and the hash of its decoding.
tests/text/tokenizer_corpus_test.cpp checks the engine against these files; when a
line differs, tools/tokenizer/diff_ids.py shows where.

Columns: doc, n_special, hash_special, n_plain, hash_plain, hash_decoded
(hash: FNV-1a 64 of the ids as little-endian uint32; hash_decoded: of the UTF-8 of
decode(ids_special, skip_special_tokens=False)).

Usage: pip install tokenizers==0.23.3; python3 tools/tokenizer/make_expected.py [names]
"""
import os
import sys

import tokenizers

from common import DATA, TOKENIZERS, corpus_docs, fnv1a64, ids_hash, load_hf, read_doc


def main():
    names = sys.argv[1:] or list(TOKENIZERS)
    out_dir = os.path.join(DATA, "expected")
    os.makedirs(out_dir, exist_ok=True)
    docs = [(d, read_doc(d)) for d in corpus_docs()]
    for name in names:
        tok = load_hf(name)
        lines = [f"# {name}: tokenizers {tokenizers.__version__}, {len(docs)} documents"]
        total = 0
        for doc, text in docs:
            tok.encode_special_tokens = False
            special = tok.encode(text, add_special_tokens=False).ids
            tok.encode_special_tokens = True
            plain = tok.encode(text, add_special_tokens=False).ids
            decoded = tok.decode(special, skip_special_tokens=False)
            lines.append("\t".join([doc, str(len(special)), ids_hash(special), str(len(plain)), ids_hash(plain),
                                    fnv1a64(decoded.encode("utf-8"))]))
            total += len(special)
        with open(os.path.join(out_dir, f"{name}.tsv"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{name}: {total} tokens", file=sys.stderr)


if __name__ == "__main__":
    main()
