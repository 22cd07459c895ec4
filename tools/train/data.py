"""Token data for m2-tiny: code streams and chat windows with loss masks, cached under a work dir."""

import os
import random

import torch
from tokenizers import Tokenizer

import chatdata
import corpus

T_DEFAULT = 768
ASSISTANT_HEAD = "]~b]ai\n"
EOT = "[e~[" 


def assistant_mask(text, enc):
    """1 for tokens inside assistant turns (after ']~b]ai\\n' up to and including '[e~[')."""
    spans = []
    p = text.find(ASSISTANT_HEAD)
    while p >= 0:
        s = p + len(ASSISTANT_HEAD)
        e = text.find(EOT, s)
        e = len(text) if e < 0 else e + len(EOT)
        spans.append((s, e))
        p = text.find(ASSISTANT_HEAD, e)
    mask = []
    j = 0
    for (a, _b) in enc.offsets:
        while j < len(spans) and spans[j][1] <= a:
            j += 1
        mask.append(1 if j < len(spans) and spans[j][0] <= a < spans[j][1] else 0)
    return mask


def chat_tokens(tok, n, seed):
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        msgs, tools, _t = chatdata.make_conversation(rng)
        texts.append(chatdata.render(msgs, tools))
    encs = tok.encode_batch(texts, add_special_tokens=False)
    return [(e.ids, assistant_mask(t, e)) for t, e in zip(texts, encs)]


def chat_windows(convs, T, pad_id):
    """Windows of T tokens, each starting at a conversation start, packed with whole conversations;
    the space left is filled with the start of the next conversation (which then also opens the
    next window). Returns ids [N, T] and mask [N, T] (mask 1 = target token counts)."""
    ids_out, mask_out = [], []
    i = 0
    while i < len(convs):
        ids, msk = [], []
        j = i
        while j < len(convs) and len(ids) + len(convs[j][0]) <= T:
            ids += convs[j][0]
            msk += convs[j][1]
            j += 1
        if j == i:  # a conversation longer than T: keep its first T tokens
            j = i + 1
        if len(ids) < T and j < len(convs):
            room = T - len(ids)
            ids += convs[j][0][:room]
            msk += convs[j][1][:room]
        if len(ids) < T:
            msk += [0] * (T - len(ids))
            ids += [pad_id] * (T - len(ids))
        ids_out.append(ids[:T])
        mask_out.append(msk[:T])
        i = j
    return torch.tensor(ids_out, dtype=torch.int32), torch.tensor(mask_out, dtype=torch.uint8)


def code_stream(tok, texts, bos_id):
    encs = tok.encode_batch(texts, add_special_tokens=False)
    out = []
    for e in encs:
        out.append(bos_id)
        out += e.ids
    return torch.tensor(out, dtype=torch.int32)


def build(work, tok_path, T=T_DEFAULT, n_chat=14000, n_chat_eval=400, seed=1):
    path = os.path.join(work, "data_T%d.pt" % T)
    if os.path.exists(path):
        return torch.load(path)
    tok = Tokenizer.from_file(tok_path)
    bos, pad = tok.token_to_id("]~!b["), tok.token_to_id("]!p~[")
    d = {}
    d["code_train"] = code_stream(tok, corpus.load_code(8_000_000, 3_000_000, heldout=False), bos)
    d["code_eval"] = code_stream(tok, corpus.load_code(400_000, 150_000, heldout=True), bos)
    d["chat_train_ids"], d["chat_train_mask"] = chat_windows(chat_tokens(tok, n_chat, seed * 1000 + 1), T, pad)
    d["chat_eval_ids"], d["chat_eval_mask"] = chat_windows(chat_tokens(tok, n_chat_eval, seed * 1000 + 2), T, pad)
    os.makedirs(work, exist_ok=True)
    torch.save(d, path + ".tmp")
    os.replace(path + ".tmp", path)
    return d
