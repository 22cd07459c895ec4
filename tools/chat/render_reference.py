#!/usr/bin/env python3
"""Renders every conversation of testdata/chat/render_cases.json with the official
MiniMax-M2 chat template and jinja2, exactly as testdata/reference/README.md says transformers
does, and writes the expected outputs the C++ renderer is tested against:

  testdata/chat/rendered/<name>.txt        the prompt, byte for byte
  testdata/chat/rendered/<name>.error.txt  "<ExceptionType>: <message>" when jinja2 rejects it

Before rendering, string tool-call arguments (the OpenAI request shape) are replaced by the
JSON object they hold, as vLLM/SGLang do and as chat::ParseToolCallArguments does; the
template itself needs them as a dict.

Needs jinja2 (pip install jinja2). Rerunnable: stale outputs are removed. Run from anywhere:
  python3 tools/chat/render_reference.py
"""
import hashlib
import json
import pathlib
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "testdata" / "reference" / "minimax-m2" / "chat_template.jinja"
TEMPLATE_SHA256_PREFIX = "967ff7e3"  # testdata/reference/README.md
CASES = ROOT / "testdata" / "chat" / "render_cases.json"
OUT = ROOT / "testdata" / "chat" / "rendered"


def make_template():
    source = TEMPLATE.read_text(encoding="utf-8")
    digest = hashlib.sha256(TEMPLATE.read_bytes()).hexdigest()
    if not digest.startswith(TEMPLATE_SHA256_PREFIX):
        sys.exit(f"{TEMPLATE}: sha256 {digest} is not the official template's")

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def parse_tool_call_arguments(messages):
    """Mirror of chat::ParseToolCallArguments (src/chat/chat_template.cpp)."""
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        if not isinstance(calls, list):
            continue
        for tool_call in calls:
            if not isinstance(tool_call, dict):
                continue
            call = tool_call["function"] if tool_call.get("function") else tool_call
            if not isinstance(call, dict) or not isinstance(call.get("arguments"), str):
                continue
            text = call["arguments"]
            if text.strip(" \t\r\n") == "":
                call["arguments"] = {}
                continue
            parsed = json.loads(text)
            if not isinstance(parsed, dict):
                raise ValueError(f"arguments {text!r} is not a JSON object")
            call["arguments"] = parsed


def main():
    template = make_template()
    cases = json.loads(CASES.read_text(encoding="utf-8"))["cases"]
    OUT.mkdir(parents=True, exist_ok=True)
    for stale in OUT.glob("*.txt"):
        stale.unlink()
    rendered = rejected = 0
    for case in cases:
        kwargs = {}
        if "model_identity" in case:
            kwargs["model_identity"] = case["model_identity"]
        try:
            messages = case["messages"]
            parse_tool_call_arguments(messages)
            text = template.render(messages=messages, tools=case.get("tools"),
                                   add_generation_prompt=case.get("add_generation_prompt", True), **kwargs)
            path, rendered = OUT / f"{case['name']}.txt", rendered + 1
        except Exception as e:  # jinja2's UndefinedError/TypeError/TemplateError, json errors
            text = f"{type(e).__name__}: {e}\n"
            path, rejected = OUT / f"{case['name']}.error.txt", rejected + 1
        # newline="" writes the bytes as they are.
        path.write_text(text, encoding="utf-8", newline="")
    print(f"{len(cases)} conversations: {rendered} rendered, {rejected} rejected -> {OUT}")


if __name__ == "__main__":
    main()
