"""Golden data for the C++ engine, from the shipped models/m2-tiny folder.

Writes testdata/m2-tiny/golden.safetensors and testdata/m2-tiny/golden.json:
  prompt: a fixed chat prompt (P token ids); greedy: 16 tokens from transformers' generate
  (do_sample=False, fp32, KV cache); seq = prompt + greedy, L = P + 16 ids.
Tensors (all F32, computed by transformers' modules in fp32 from the BF16 weights, one forward
pass over seq without a cache):
  trunk_logits  [L, V]        row i = logits after seq[0..i] (predicts seq[i+1])
  mtp{k}_logits [L-k-1, V]    MTP module k (k = 0, 1, 2), row i predicts seq[i+k+2]; module k's
                              input at i is h^k_i (h^0 = trunk hidden before model.norm) and the
                              embedding of seq[i+k+1]; RoPE position i.
  seq_ids       [L] (I32)     the ids, for convenience
Usage: python tools/train/make_golden.py [--model models/m2-tiny] [--out testdata/m2-tiny]
"""

import argparse
import hashlib
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
PROMPT_MESSAGES = [{"role": "user", "content": "Hi!"}]
STEPS = 16


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(REPO, "models", "m2-tiny"))
    ap.add_argument("--out", default=os.path.join(REPO, "testdata", "m2-tiny"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import transformers

    tk = AutoTokenizer.from_pretrained(args.model)
    hf = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    hf.eval()
    text = tk.apply_chat_template(PROMPT_MESSAGES, tokenize=False, add_generation_prompt=True)
    # no tools block: keeps the prompt short (~24 ids) while covering the special tokens
    prompt = tk(text, add_special_tokens=False)["input_ids"]
    eos = tk.convert_tokens_to_ids("[e~[")
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False,
                          pad_token_id=eos)
    greedy = out[0, len(prompt):].tolist()
    assert len(greedy) == STEPS
    seq = torch.tensor([prompt + greedy])
    mtp_model = export.load_folder(args.model)
    with torch.no_grad():
        trunk = hf(seq).logits[0].float()
        outs = mtp_model.forward_all(seq)
    assert torch.equal(outs[0][0], trunk), "our trunk differs from transformers'"
    P = len(prompt)
    one_pass = trunk[P - 1:P - 1 + STEPS].argmax(-1).tolist()
    tensors = {"trunk_logits": trunk.contiguous(), "seq_ids": seq[0].to(torch.int32).contiguous()}
    for k in range(len(mtp_model.mtp)):
        tensors["mtp%d_logits" % k] = outs[k + 1][0].float().contiguous()
    os.makedirs(args.out, exist_ok=True)
    st = os.path.join(args.out, "golden.safetensors")
    save_file(tensors, st, metadata={"format": "pt"})
    meta = {
        "model": os.path.relpath(args.model, REPO),
        "model_safetensors_sha256": sha256(os.path.join(args.model, "model.safetensors")),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "compute": "fp32 on CPU from the BF16 weights; one forward pass over seq, no KV cache",
        "prompt_messages": PROMPT_MESSAGES,
        "prompt_text": text,
        "prompt_ids": prompt,
        "greedy_steps": STEPS,
        "greedy_ids": greedy,
        "greedy_text": tk.decode(greedy, skip_special_tokens=False),
        "greedy_from_one_pass_argmax_matches": one_pass == greedy,
        "seq_len": seq.shape[1],
        "tensors": {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
                    for k, v in tensors.items()},
        "mtp_argmax": {"mtp%d" % k: outs[k + 1][0].argmax(-1).tolist() for k in range(len(mtp_model.mtp))},
        "conventions": {
            "trunk_logits": "row i predicts seq[i+1]",
            "mtpK_logits": "row i predicts seq[i+K+2]; input h^K_i (h^0 = trunk last hidden before model.norm) "
                           "and embedding of seq[i+K+1]; RoPE position i; stored at model.layers.{4+K}.*",
        },
    }
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("prompt %d ids, greedy %r, wrote %s (%.2f MB)" % (P, meta["greedy_text"], st, os.path.getsize(st) / 1e6))


if __name__ == "__main__":
    main()
