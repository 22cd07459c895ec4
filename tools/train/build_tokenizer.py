"""Train the m2-tiny byte-level BPE tokenizer (GPT-4o split regex) and add the MiniMax-M2 special tokens.

Layout, mirroring the real MiniMax-M2 tokenizer at a smaller scale:
  ids 0 .. N_BPE-1          256 byte symbols + merges learnt here
  ids N_BPE .. N_BPE+63     64 added tokens; the known MiniMax-M2 ones sit at the same offsets
                            as in the real file (real id - 200000), the rest are reserved fillers.

Usage: python build_tokenizer.py OUT_DIR   (writes OUT_DIR/tokenizer.json)
"""

import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chatdata  # noqa: E402
import corpus  # noqa: E402

VOCAB_SIZE = 8192
N_ADDED = 64
N_BPE = VOCAB_SIZE - N_ADDED

# offset -> (content, special); offsets are real MiniMax-M2 id - 200000
KNOWN_ADDED = {
    0: ("]!p~[", True),
    19: ("]~b]", True),
    20: ("[e~[", True),
    21: ("]!d~[", True),
    34: ("]~!b[", True),
    50: ("<think>", False),
    51: ("</think>", False),
    52: ("<minimax:tool_call>", False),
    53: ("</minimax:tool_call>", False),
}


def added_tokens():
    out = []
    for off in range(N_ADDED):
        if off in KNOWN_ADDED:
            out.append(KNOWN_ADDED[off])
        else:
            out.append(("]~reserved_%02d~[" % off, True))
    return out


# The o200k (GPT-4o) pre-tokenization pattern.
GPT4O_SPLIT = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])


def training_texts(seed=1234):
    texts = corpus.load_code(max_py_bytes=6_000_000, max_c_bytes=2_000_000, heldout=False)
    rng = random.Random(seed)
    specials = [c for c, _ in added_tokens()]
    for _ in range(4000):
        msgs, tools, _t = chatdata.make_conversation(rng)
        t = chatdata.render(msgs, tools)
        for s in specials:  # special strings are single added tokens, keep them out of the merges
            t = t.replace(s, "\n")
        texts.append(t)
    return texts


def build(out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4O_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=N_BPE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(training_texts(), trainer=trainer)
    assert tok.get_vocab_size() == N_BPE, tok.get_vocab_size()
    for i, (content, special) in enumerate(added_tokens()):
        at = AddedToken(content, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        n = tok.add_special_tokens([at]) if special else tok.add_tokens([at])
        assert n == 1 and tok.token_to_id(content) == N_BPE + i, (content, tok.token_to_id(content))
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    return tok


if __name__ == "__main__":
    t = build(sys.argv[1] if len(sys.argv) > 1 else "/tmp/m2tiny/tok")
    print("vocab", t.get_vocab_size())
