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


VALUE_WEIGHT = 3


def _value_spans(text, s, e):
    """Character spans inside [s, e) that hold tool-argument values (<parameter ...>VALUE</parameter>)."""
    out = []
    p = text.find("<parameter name=", s, e)
    while p >= 0:
        a = text.find('">', p, e)
        if a < 0:
            break
        b = text.find("</parameter>", a, e)
        if b < 0:
            break
        out.append((a + 2, b))
        p = text.find("<parameter name=", b, e)
    return out


def assistant_mask(text, enc):
    """Loss weight per token: 0 outside assistant turns (after ']~b]ai\\n' up to and including '[e~['),
    1 inside, VALUE_WEIGHT for tokens that carry what must be copied from the context: tool-argument
    values and any token with a digit (numbers from the request or from a tool result)."""
    spans = []
    p = text.find(ASSISTANT_HEAD)
    while p >= 0:
        s = p + len(ASSISTANT_HEAD)
        e = text.find(EOT, s)
        e = len(text) if e < 0 else e + len(EOT)
        spans.append((s, e))
        p = text.find(ASSISTANT_HEAD, e)
    values = [v for (s, e) in spans for v in _value_spans(text, s, e)]
    mask = []
    j = k = 0
    for (a, b) in enc.offsets:
        while j < len(spans) and spans[j][1] <= a:
            j += 1
        while k < len(values) and values[k][1] <= a:
            k += 1
        inside = j < len(spans) and spans[j][0] <= a < spans[j][1]
        if not inside:
            mask.append(0)
        elif (k < len(values) and values[k][0] <= a < values[k][1]) or any(c.isdigit() for c in text[a:b]):
            mask.append(VALUE_WEIGHT)
        else:
            mask.append(1)
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
