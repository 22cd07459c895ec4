#!/usr/bin/env python3
"""Differential check of `m2 render` against jinja2 on random conversations.

Builds random requests (roles, content as strings / parts / None / dicts, reasoning,
tool calls nested, flat and as JSON strings, tools with random schemas, system dates),
renders each with the official template exactly as render_reference.py does, runs
`m2 render` on it, and reports every conversation where the two disagree: different
bytes, or one rejecting what the other renders. Needs jinja2 and a built m2.

  python3 tools/chat/compare_random.py --m2 build-chat/src/cli/m2 --seed 1 --count 500
"""
import argparse
import copy
import json
import pathlib
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import render_reference  # noqa: E402

PIECES = ["a", "b", " ", "\n", "\n\n", "<think>", "</think>", "'", '"', "\\", "é", "中", "😀", "\t", "\x01",
          "\x7f", "\u00a0", "\u200b", "<", ">", "x y", "None", "\r"]


class Generator:
    def __init__(self, seed):
        self.rnd = random.Random(seed)

    def text(self, n=6):
        return "".join(self.rnd.choice(PIECES) for _ in range(self.rnd.randint(0, n)))

    def scalar(self):
        return self.rnd.choice([self.text(), self.rnd.randint(-5, 5),
                                self.rnd.choice([0.5, 1.0, 1e16, 1e-7, -0.0, 123.25]), True, False, None])

    def value(self, depth=0):
        r = self.rnd.random()
        if depth < 2 and r < 0.15:
            return [self.value(depth + 1) for _ in range(self.rnd.randint(0, 3))]
        if depth < 2 and r < 0.3:
            return {self.text(3) or "k": self.value(depth + 1) for _ in range(self.rnd.randint(0, 3))}
        return self.scalar()

    def content(self):
        r = self.rnd.random()
        if r < 0.45:
            return self.text(10)
        if r < 0.6:
            parts = [{"type": "text", "text": self.text()}, {"type": "image"}, self.text(), {"type": "text"},
                     {"type": "text", "text": self.scalar()}, 5]
            return [self.rnd.choice(parts) for _ in range(self.rnd.randint(0, 3))]
        if r < 0.65:
            return None
        if r < 0.85:
            return "MISSING"
        return self.value()

    def tool_call(self):
        args = {self.text(3) or "k": self.value() for _ in range(self.rnd.randint(0, 3))}
        if self.rnd.random() < 0.1:
            args = json.dumps(args)
        name = self.rnd.choice(["f", "get_weather", "名前"]) if self.rnd.random() < 0.99 else self.rnd.choice([5, None])
        r = self.rnd.random()
        if r < 0.9:
            return {"type": "function", "function": {"name": name, "arguments": args}}
        if r < 0.95:
            return {"name": name, "arguments": args}
        return {"function": None, "name": name, "arguments": args}

    def message(self, first):
        roles = (["user", "assistant", "assistant", "assistant", "tool", "system", "developer"] if first else
                 ["user", "assistant", "assistant", "tool", "tool", "tool", "system", "developer"])
        role = self.rnd.choice(roles)
        m = {"role": role}
        c = self.content()
        if c != "MISSING":
            m["content"] = c
        if role == "system":
            if self.rnd.random() < 0.4:
                m["current_date"] = self.rnd.choice(["2025-01-01", "", None, "日期"])
            if self.rnd.random() < 0.4:
                m["current_location"] = self.rnd.choice(["Paris", "", None])
        if role == "assistant":
            if self.rnd.random() < 0.4:
                m["reasoning_content"] = self.rnd.choice([self.text(8), None, "", 5])
            if self.rnd.random() < 0.8:
                m["tool_calls"] = [self.tool_call() for _ in range(self.rnd.randint(0, 3))]
        return m

    def tools(self):
        r = self.rnd.random()
        if r < 0.4:
            return None
        if r < 0.5:
            return []
        return [{"type": "function", "function": {"name": self.text(3), "description": self.text(8),
                                                  "parameters": self.value()}}
                for _ in range(self.rnd.randint(1, 3))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m2", default=str(render_reference.ROOT / "build" / "src" / "cli" / "m2"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=300)
    args = ap.parse_args()
    template = render_reference.make_template()
    gen = Generator(args.seed)
    mismatches = rejected = 0
    with tempfile.TemporaryDirectory() as tmp:
        request_path = pathlib.Path(tmp) / "request.json"
        for i in range(args.count):
            messages = [gen.message(k == 0) for k in range(gen.rnd.randint(0, 7))]
            tools = gen.tools()
            prompt = gen.rnd.random() < 0.7
            request_path.write_text(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False),
                                    encoding="utf-8")
            try:
                normalized = copy.deepcopy(messages)
                render_reference.parse_tool_call_arguments(normalized)
                expected, ok = template.render(messages=normalized, tools=tools, add_generation_prompt=prompt), True
            except Exception as e:  # what jinja2 rejects, m2 must reject
                expected, ok = f"{type(e).__name__}: {e}", False
                rejected += 1
            cmd = [args.m2, "render", str(request_path)] + ([] if prompt else ["--no-generation-prompt"])
            run = subprocess.run(cmd, capture_output=True)
            got = run.stdout.decode("utf-8")
            if ok != (run.returncode == 0) or (ok and got != expected):
                mismatches += 1
                print(f"MISMATCH #{i}: {request_path.read_text(encoding='utf-8')}")
                print(f"  jinja2: {expected!r}")
                print(f"  m2:     {got!r} {run.stderr.decode()!r}")
    print(f"{args.count} random conversations ({rejected} rejected by jinja2): {mismatches} mismatches")
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
