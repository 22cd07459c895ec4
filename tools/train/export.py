"""Export a training checkpoint to the Hugging Face folder models/m2-tiny and verify it.

Writes config.json, model.safetensors (released MiniMax-M2 tensor names, see model.py),
tokenizer.json, tokenizer_config.json (with our chat template), generation_config.json.
Verifies that transformers' from_pretrained on the folder reproduces the trained model's trunk
logits exactly (fp32 compute on the BF16-rounded weights) and that the MTP tensors round-trip.

Usage: python tools/train/export.py CKPT TOKENIZER_JSON [OUT_DIR]
"""

import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model as M  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
TEMPLATE = os.path.join(HERE, "chat_template.jinja")


def model_from_ckpt(ckpt_path, tok):
    c = torch.load(ckpt_path, weights_only=False, map_location="cpu")
    cfg = M.make_config(tok.get_vocab_size(), tok.token_to_id("]~!b["), tok.token_to_id("[e~["),
                        tok.token_to_id("]!p~["))
    m = M.M2Tiny(cfg)
    m.load_state_dict(c["model"])
    return m, c


def load_folder(folder):
    """M2Tiny (fp32) with the weights of an exported folder (trunk and MTP)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(folder)
    m = M.M2Tiny(cfg)
    M.load_released_state_dict(m, load_file(os.path.join(folder, "model.safetensors")))
    m.eval()
    return m


def write_config(cfg, out):
    cfg.save_pretrained(out)  # writes config.json
    p = os.path.join(out, "config.json")
    with open(p) as f:
        j = json.load(f)
    j["architectures"] = ["MiniMaxM2ForCausalLM"]
    j["rope_theta"] = cfg.rope_parameters["rope_theta"]
    j["partial_rotary_factor"] = cfg.rope_parameters["partial_rotary_factor"]
    j["dtype"] = "bfloat16"
    j.pop("transformers_version", None)
    with open(p, "w") as f:
        json.dump(dict(sorted(j.items())), f, indent=2)
        f.write("\n")


def write_tokenizer(tok_path, out):
    shutil.copyfile(tok_path, os.path.join(out, "tokenizer.json"))
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    tc = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "]~!b[",
        "eos_token": "[e~[",
        "unk_token": "]!d~[",
        "pad_token": "]!p~[",
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "chat_template": template,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_generation_config(cfg, out):
    g = {"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "pad_token_id": cfg.pad_token_id,
         "do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 40, "max_new_tokens": 256}
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(g, f, indent=2)
        f.write("\n")


@torch.no_grad()
def verify(model, out, log=print):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import chatdata
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    hf.eval()
    ref = load_folder(out)
    # 1. the folder's weights equal the trained weights rounded to BF16
    mine = M.released_state_dict(model)
    again = M.released_state_dict(ref)
    assert all(torch.equal(mine[k], again[k]) for k in mine), "released tensors do not round-trip"
    # 2. transformers' loader reproduces the trunk logits exactly
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.cfg.vocab_size, (2, 64), generator=g)
    a = hf(ids).logits
    b = ref.forward_all(ids)[0]
    assert torch.equal(a, b), "from_pretrained logits differ: max %g" % (a - b).abs().max().item()
    # 3. tokenizer + template through transformers equal our renderer
    tk = AutoTokenizer.from_pretrained(out)
    from tokenizers import Tokenizer
    raw_tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    import random
    rng = random.Random(5)
    for _ in range(5):
        msgs, tools, _t = chatdata.make_conversation(rng)
        want = chatdata.render(msgs, tools, add_generation_prompt=True)
        got = tk.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
        assert got == want, "apply_chat_template differs"
        enc = tk(want, add_special_tokens=False)["input_ids"]
        assert enc == raw_tok.encode(want, add_special_tokens=False).ids, "transformers tokenizes differently"
        assert tk.decode(enc) == want, "decode does not round-trip"
    log("verify ok: from_pretrained logits identical, %d tensors round-trip, chat template ok" % len(mine))


def export(ckpt_path, tok_path, out, fh=None):
    from safetensors.torch import save_file
    from tokenizers import Tokenizer

    def log(msg):
        print(msg, flush=True)
        if fh:
            fh.write(msg + "\n")
            fh.flush()

    tok = Tokenizer.from_file(tok_path)
    model, _c = model_from_ckpt(ckpt_path, tok)
    model.eval()
    os.makedirs(out, exist_ok=True)
    sd = M.released_state_dict(model)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    write_config(model.cfg, out)
    write_tokenizer(tok_path, out)
    write_generation_config(model.cfg, out)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    log("exported %d tensors to %s, folder %.2f MB" % (len(sd), out, size / 1e6))
    verify(model, out, log)


if __name__ == "__main__":
    export(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else os.path.join(REPO, "models", "m2-tiny"))
