#!/usr/bin/env python3
"""Tool-call accuracy of the bundled model run through OUR engine (the m2 binary), on the
same held-out synthetic tasks and with the same scoring as evaluate.py (which runs them
through transformers). Greedy decoding, at most 160 new tokens per reply.

    python3 tools/train/eval_engine.py [--m2 build/src/cli/m2] [--model models/m2-tiny] [--tasks 100]

For each task: the conversation up to the user's request is rendered with the model's chat
template and generation prompt, `m2 generate -f PROMPT -n 160 --temperature 0` writes the
reply, which is scored for the right tool, typed arguments and exact arguments; then the tool
result (of the model's own call when right, else the reference call) is appended and the
final answer must contain the expected value.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chatdata  # noqa: E402
import evaluate as E  # noqa: E402  (scoring helpers only; torch is imported but not used here)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m2", default=os.path.join(E.REPO, "build", "src", "cli", "m2"))
    ap.add_argument("--model", default=os.path.join(E.REPO, "models", "m2-tiny"))
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    template = os.path.join(a.model, "tokenizer_config.json")
    tmpl_text = json.load(open(template))["chat_template"]
    tmp = tempfile.mkdtemp()
    tpath = os.path.join(tmp, "template.jinja")
    open(tpath, "w").write(tmpl_text)

    def gen(msgs, tools):
        prompt = chatdata.render(msgs, tools=tools, add_generation_prompt=True, template_path=tpath)
        p = os.path.join(tmp, "prompt.txt")
        open(p, "w", encoding="utf-8").write(prompt)
        r = subprocess.run([a.m2, "generate", "-m", a.model, "-f", p, "-n", "160", "--temperature", "0"],
                           capture_output=True, text=True, check=True)
        return r.stdout

    import random
    rng = random.Random(E.EVAL_SEED)
    c = dict(format=0, tool=0, typed=0, args=0, final=0, end_to_end=0)
    rows = []
    for t in range(a.tasks):
        msgs, tools, task = chatdata.make_conversation(rng, for_eval=True)
        n = task["n_msgs"]
        prompt_msgs = msgs[:n]
        want = [(nm, x) for nm, x in task["calls"]]
        reply = gen(prompt_msgs, tools)
        reasoning, content, raw_calls = E.parse_reply(reply)
        got = [(nm, chatdata.coerce_args(nm, ra)) if nm in chatdata.TOOLS else (nm, ra) for nm, ra in raw_calls]
        fmt = bool(raw_calls) and reply.rstrip().endswith(("[e~[", "</minimax:tool_call>"))
        tool_ok = sorted(nm for nm, _ in got) == sorted(nm for nm, _ in want)
        typed = tool_ok and all(E.typed_ok(nm, x) for nm, x in got)
        args_ok = E.calls_match(got, want)
        ref_call_msg = msgs[n]
        ref_results = msgs[n + 1:n + 1 + len(ref_call_msg["tool_calls"])]
        if args_ok:
            call_msg = {"role": "assistant", "content": content, "reasoning_content": reasoning,
                        "tool_calls": [{"type": "function", "id": "call_%d" % i,
                                        "function": {"name": nm, "arguments": x}} for i, (nm, x) in enumerate(got)]}
            results = [{"role": "tool", "content": chatdata.run_tool(nm, x)} for nm, x in got]
        else:
            call_msg, results = ref_call_msg, ref_results
        reply2 = gen(prompt_msgs + [call_msg] + results, tools)
        _r2, answer, calls2 = E.parse_reply(reply2)
        final_ok = all(k in answer for k in task["key"]) and not calls2
        for key, v in (("format", fmt), ("tool", tool_ok), ("typed", typed), ("args", args_ok),
                       ("final", final_ok), ("end_to_end", args_ok and final_ok)):
            c[key] += int(v)
        rows.append({"query": task["query"], "reply": reply, "answer": reply2, "args_ok": args_ok,
                     "final_ok": final_ok})
    summary = {k: v / a.tasks for k, v in c.items()}
    summary["n_tasks"] = a.tasks
    print(json.dumps(summary, indent=1))
    if a.out:
        json.dump({"summary": summary, "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
