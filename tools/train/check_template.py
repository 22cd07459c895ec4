"""Check that our chat template (tools/train/chat_template.jinja, shipped in
models/m2-tiny/tokenizer_config.json) renders byte-identically to the official MiniMax-M2 template.

Both are rendered the way transformers does (see chatdata.jinja_env). Exits 1 on any difference.
Usage: python tools/train/check_template.py [--official PATH] [--shipped]
  --shipped  also take the template from models/m2-tiny/tokenizer_config.json
"""

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chatdata  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
OFFICIAL = os.path.join(REPO, "testdata", "reference", "minimax-m2", "chat_template.jinja")

W = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "days": {"type": "integer"},
                                          "metric": {"type": "boolean"}}, "required": ["city"]}}}
S = {"type": "function", "function": {"name": "search", "description": "Søk på nettet — 検索",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}


def call(name, args, wrap=True, cid="c1"):
    f = {"name": name, "arguments": args}
    return {"type": "function", "id": cid, "function": f} if wrap else f


def hand_cases():
    """(kwargs for render) covering the template's branches."""
    u = lambda t: {"role": "user", "content": t}  # noqa: E731
    a = lambda t, **k: dict({"role": "assistant", "content": t}, **k)  # noqa: E731
    tool = lambda t: {"role": "tool", "content": t}  # noqa: E731
    sysm = lambda t, **k: dict({"role": "system", "content": t}, **k)  # noqa: E731
    wcall = call("get_weather", {"city": "Oslo", "days": 3, "metric": True, "extra": None,
                                 "opts": {"lang": "nb", "units": [1, 2.5]}, "note": "fint vær — ☀"})
    cases = [
        dict(messages=[u("Hi")]),
        dict(messages=[u("Hi")], add_generation_prompt=True),
        dict(messages=[sysm("Be brief.")] + [u("Hi")], add_generation_prompt=True),
        dict(messages=[sysm("")] + [u("Hi")]),  # empty system content -> default identity
        dict(messages=[sysm(None)] + [u("Hi")]),
        dict(messages=[u("Hi")], model_identity="I am m2-tiny."),
        dict(messages=[sysm("S", current_date="2025-01-02", current_location="Oslo")] + [u("Hi")]),
        dict(messages=[sysm("", current_date="2025-01-02")] + [u("Hi")]),
        dict(messages=[u("Hi")], tools=[W]),
        dict(messages=[sysm("Sys")] + [u("Hi")], tools=[W, S], add_generation_prompt=True),
        dict(messages=[u("Hi")], tools=[]),
        dict(messages=[u("q"), a("ans", reasoning_content="because")]),
        dict(messages=[u("q"), a("ans", reasoning_content="")]),
        dict(messages=[u("q"), a("<think>\ninline thought\n</think>\n\nanswer")]),
        dict(messages=[u("q"), a("<think>x</think>y")]),
        dict(messages=[u("q"), a("pre<think>\nA\n</think>mid</think>\n\npost")]),
        dict(messages=[u("q"), a("no think close <think> only")]),
        dict(messages=[u("q"), a("<think>\nold\n</think>\n\nold ans"), u("q2"), a("new", reasoning_content="r2")]),
        dict(messages=[u("q"), a("a1", reasoning_content="r1"), u("q2")], add_generation_prompt=True),
        dict(messages=[u("q"), a("", reasoning_content="r", tool_calls=[wcall]), tool("sunny"),
                       a("It is sunny.", reasoning_content="done")], tools=[W]),
        dict(messages=[u("q"), a(None, tool_calls=[wcall]), tool("sunny")], tools=[W], add_generation_prompt=True),
        dict(messages=[u("q"), {"role": "assistant", "tool_calls": [wcall]}, tool("sunny")], tools=[W]),
        dict(messages=[u("q"), a("x", tool_calls=[call("get_weather", {"city": "A"}, cid="1"),
                                               call("search", {"q": "B"}, cid="2")]),
                       tool("r1"), tool("r2"), a("done")], tools=[W, S]),
        dict(messages=[u("q"), a("x", tool_calls=[call("get_weather", {"city": "A"}, wrap=False)])], tools=[W]),
        dict(messages=[u("q"), a("x", tool_calls=[call("search", {})]), tool("none")], tools=[S]),
        dict(messages=[u("q"), a("", tool_calls=[call("search", {"q": "x"})]),
                       {"role": "tool", "content": [{"type": "text", "text": "part1"}, {"output": "out2"},
                                                    {"type": "image", "url": "u"}]}], tools=[S]),
        dict(messages=[u("q"), a("", tool_calls=[call("search", {"q": "x"})]), tool("r"), u("again"), tool("late")],
             tools=[S]),
        dict(messages=[u([{"type": "text", "text": "part A "}, {"type": "image_url", "image_url": "x"}, "raw B"])]),
        dict(messages=[u("q"), a([{"type": "text", "text": "<think>\nlisted\n</think>\n\n"},
                                  {"type": "text", "text": "list answer"}])]),
        dict(messages=[sysm([{"type": "text", "text": "sys as parts"}])] + [u("Hi")]),
        dict(messages=[u("q"), {"role": "system", "content": "mid system is dropped"}, u("q2")]),
        dict(messages=[u("q"), a("a"), {"role": "developer", "content": "ignored"}]),
        dict(messages=[a("assistant first", reasoning_content="r0"), u("q")], add_generation_prompt=True),
        dict(messages=[a("only assistant", reasoning_content="r0")]),
        dict(messages=[u("q"), a(123)]),
        dict(messages=[u("Unicode: æøå, 中文, emoji 🚀, quotes \" ' and <tags>")], tools=[S]),
        dict(messages=[u("q"), a("", reasoning_content="think", tool_calls=[call("get_weather", {
            "city": "Paris", "days": 0, "metric": False, "ratio": 0.1, "big": 10 ** 20, "neg": -3.5e-7})])],
             tools=[W]),
        dict(messages=[u("q1"), a("a1", reasoning_content="t1"), u("q2"), a("a2", reasoning_content="t2"),
                       u("q3"), a("", reasoning_content="t3", tool_calls=[call("search", {"q": "z"})]),
                       tool("zr"), a("a3", reasoning_content="t4")], tools=[S], add_generation_prompt=False),
        dict(messages=[]),
        dict(messages=[], add_generation_prompt=True),
    ]
    return cases


def error_cases():
    """Cases both templates must reject (raise_exception)."""
    return [
        dict(messages=[{"role": "user", "content": "q"}, {"role": "tool", "content": "orphan"}]),
        dict(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                       {"role": "tool", "content": "after plain answer"}]),
    ]


def generated_cases(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs, tools, _t = chatdata.make_conversation(rng)
        out.append(dict(messages=msgs, tools=tools or None, add_generation_prompt=bool(i % 2)))
    return out


def outcome(path, kw):
    """("ok", text) or ("error", None): where the official template fails, ours must fail too."""
    try:
        return ("ok", chatdata.render(template_path=path, **kw))
    except Exception:
        return ("error", None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--official", default=OFFICIAL)
    ap.add_argument("--shipped", action="store_true")
    ap.add_argument("--generated", type=int, default=200)
    args = ap.parse_args()
    ours = [os.path.join(HERE, "chat_template.jinja")]
    if args.shipped:
        tc = os.path.join(REPO, "models", "m2-tiny", "tokenizer_config.json")
        with open(tc, encoding="utf-8") as f:
            tmp = "/tmp/m2tiny_shipped_template.jinja"
            with open(tmp, "w", encoding="utf-8") as g:
                g.write(json.load(f)["chat_template"])
        ours.append(tmp)
    cases = hand_cases() + generated_cases(args.generated, 7)
    bad = n_err = 0
    for tpath in ours:
        for i, kw in enumerate(cases):
            want, got = outcome(args.official, kw), outcome(tpath, kw)
            if want[0] == "error":
                n_err += 1
            if got != want:
                bad += 1
                print("MISMATCH case %d (%s)\n want %r\n got  %r" % (i, tpath, want, got))
        for i, kw in enumerate(error_cases()):
            for p in (args.official, tpath):
                try:
                    chatdata.render(template_path=p, **kw)
                    bad += 1
                    print("error case %d did not raise with %s" % (i, p))
                except Exception:
                    pass
    n = len(cases) * len(ours)
    print("%d renderings compared (%d hand-written cases, %d generated; %d where both templates raise), "
          "%d mismatches" % (n, len(hand_cases()), args.generated, n_err, bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
