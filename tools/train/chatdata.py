"""Synthetic MiniMax-M2 chat conversations for training and evaluating m2-tiny.

Every conversation is a list of OpenAI-style messages plus a list of tool definitions.
The tools are small, deterministic Python functions, so each task has one right
tool call (name + typed arguments) and one right final answer; eval_tools.py uses
the same functions to run the model's calls and to check the answers.

Conversations are rendered to text with our chat template (chat_template.jinja,
byte-identical to the official MiniMax-M2 one, see check_template.py).
"""

import json
import math
import random

# ----------------------------------------------------------------------------------------
# Tools
# ----------------------------------------------------------------------------------------

COUNTRIES = {
    # name: capital, currency, continent, population in millions (rounded), calling code
    "France": ("Paris", "euro", "Europe", 68, "+33"),
    "Germany": ("Berlin", "euro", "Europe", 84, "+49"),
    "Italy": ("Rome", "euro", "Europe", 59, "+39"),
    "Spain": ("Madrid", "euro", "Europe", 48, "+34"),
    "Portugal": ("Lisbon", "euro", "Europe", 10, "+351"),
    "Poland": ("Warsaw", "zloty", "Europe", 37, "+48"),
    "Sweden": ("Stockholm", "krona", "Europe", 10, "+46"),
    "Norway": ("Oslo", "krone", "Europe", 5, "+47"),
    "Japan": ("Tokyo", "yen", "Asia", 124, "+81"),
    "China": ("Beijing", "renminbi", "Asia", 1410, "+86"),
    "India": ("New Delhi", "rupee", "Asia", 1430, "+91"),
    "Thailand": ("Bangkok", "baht", "Asia", 70, "+66"),
    "Vietnam": ("Hanoi", "dong", "Asia", 100, "+84"),
    "Egypt": ("Cairo", "pound", "Africa", 112, "+20"),
    "Kenya": ("Nairobi", "shilling", "Africa", 55, "+254"),
    "Nigeria": ("Abuja", "naira", "Africa", 223, "+234"),
    "Morocco": ("Rabat", "dirham", "Africa", 37, "+212"),
    "Brazil": ("Brasilia", "real", "South America", 216, "+55"),
    "Argentina": ("Buenos Aires", "peso", "South America", 46, "+54"),
    "Peru": ("Lima", "sol", "South America", 34, "+51"),
    "Chile": ("Santiago", "peso", "South America", 20, "+56"),
    "Canada": ("Ottawa", "dollar", "North America", 40, "+1"),
    "Mexico": ("Mexico City", "peso", "North America", 128, "+52"),
    "Australia": ("Canberra", "dollar", "Oceania", 27, "+61"),
    "New Zealand": ("Wellington", "dollar", "Oceania", 5, "+64"),
}
COUNTRY_FIELDS = ["capital", "currency", "continent", "population_millions", "calling_code"]

# unit -> (dimension, factor to the base unit); temperatures are handled apart
UNITS = {
    "m": ("length", 1.0), "km": ("length", 1000.0), "cm": ("length", 0.01),
    "mi": ("length", 1609.344), "ft": ("length", 0.3048), "in": ("length", 0.0254),
    "kg": ("mass", 1.0), "g": ("mass", 0.001), "lb": ("mass", 0.45359237), "oz": ("mass", 0.028349523125),
    "l": ("volume", 1.0), "ml": ("volume", 0.001), "gal": ("volume", 3.785411784),
    "celsius": ("temperature", None), "fahrenheit": ("temperature", None), "kelvin": ("temperature", None),
}
UNIT_WORDS = {
    "m": ["meters", "metres", "m"], "km": ["kilometers", "km", "kilometres"], "cm": ["centimeters", "cm"],
    "mi": ["miles", "mi"], "ft": ["feet", "ft"], "in": ["inches", "in"],
    "kg": ["kilograms", "kg"], "g": ["grams", "g"], "lb": ["pounds", "lb", "lbs"], "oz": ["ounces", "oz"],
    "l": ["liters", "litres", "L"], "ml": ["milliliters", "mL"], "gal": ["gallons", "gal"],
    "celsius": ["degrees Celsius", "Celsius", "°C"], "fahrenheit": ["degrees Fahrenheit", "Fahrenheit", "°F"],
    "kelvin": ["kelvin", "K"],
}


def _num(x):
    """Canonical number: ints stay ints, floats rounded to 4 decimals, integral floats become ints."""
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return x
    x = round(float(x), 4)
    if x == int(x) and abs(x) < 1e15:
        return int(x)
    return x


def tool_calculate(operation, a, b):
    if operation == "add":
        r = a + b
    elif operation == "subtract":
        r = a - b
    elif operation == "multiply":
        r = a * b
    elif operation == "divide":
        if b == 0:
            return {"error": "division by zero"}
        r = a / b
    else:
        return {"error": "unknown operation " + str(operation)}
    return {"result": _num(r)}


def tool_convert_units(value, from_unit, to_unit):
    if from_unit not in UNITS or to_unit not in UNITS:
        return {"error": "unknown unit"}
    d1, f1 = UNITS[from_unit]
    d2, f2 = UNITS[to_unit]
    if d1 != d2:
        return {"error": "cannot convert " + d1 + " to " + d2}
    if d1 == "temperature":
        k = {"celsius": lambda v: v + 273.15, "fahrenheit": lambda v: (v - 32) * 5 / 9 + 273.15,
             "kelvin": lambda v: v}[from_unit](value)
        r = {"celsius": lambda t: t - 273.15, "fahrenheit": lambda t: (t - 273.15) * 9 / 5 + 32,
             "kelvin": lambda t: t}[to_unit](k)
    else:
        r = value * f1 / f2
    return {"value": _num(round(r, 3)), "unit": to_unit}


def tool_lookup_country(country, field):
    row = COUNTRIES.get(country)
    if row is None:
        return {"error": "country not in table"}
    if field not in COUNTRY_FIELDS:
        return {"error": "unknown field"}
    return {"country": country, field: row[COUNTRY_FIELDS.index(field)]}


def tool_sort_numbers(numbers, descending=False):
    return {"sorted": sorted(numbers, reverse=bool(descending))}


def tool_is_prime(n):
    if n < 2:
        return {"n": n, "prime": False}
    for d in range(2, int(math.isqrt(n)) + 1):
        if n % d == 0:
            return {"n": n, "prime": False, "smallest_factor": d}
    return {"n": n, "prime": True}


def tool_round_number(value, digits):
    return {"result": _num(round(value, digits))}


TOOLS = {
    "calculate": {
        "fn": tool_calculate,
        "schema": {
            "name": "calculate",
            "description": "Apply one arithmetic operation to two numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "operation": {"type": "string", "enum": ["add", "subtract", "multiply", "divide"]},
                    "a": {"type": "number", "description": "first operand"},
                    "b": {"type": "number", "description": "second operand"},
                },
                "required": ["operation", "a", "b"],
            },
        },
    },
    "convert_units": {
        "fn": tool_convert_units,
        "schema": {
            "name": "convert_units",
            "description": "Convert a quantity between units of length, mass, volume or temperature.",
            "parameters": {
                "type": "object",
                "properties": {
                    "value": {"type": "number"},
                    "from_unit": {"type": "string", "description": "m, km, cm, mi, ft, in, kg, g, lb, oz, l, ml, gal, celsius, fahrenheit or kelvin"},
                    "to_unit": {"type": "string"},
                },
                "required": ["value", "from_unit", "to_unit"],
            },
        },
    },
    "lookup_country": {
        "fn": tool_lookup_country,
        "schema": {
            "name": "lookup_country",
            "description": "Look up one field of a country in the reference table.",
            "parameters": {
                "type": "object",
                "properties": {
                    "country": {"type": "string"},
                    "field": {"type": "string", "enum": COUNTRY_FIELDS},
                },
                "required": ["country", "field"],
            },
        },
    },
    "sort_numbers": {
        "fn": tool_sort_numbers,
        "schema": {
            "name": "sort_numbers",
            "description": "Sort a list of integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "numbers": {"type": "array", "items": {"type": "integer"}},
                    "descending": {"type": "boolean"},
                },
                "required": ["numbers", "descending"],
            },
        },
    },
    "is_prime": {
        "fn": tool_is_prime,
        "schema": {
            "name": "is_prime",
            "description": "Tell whether an integer is a prime number.",
            "parameters": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
        },
    },
    "round_number": {
        "fn": tool_round_number,
        "schema": {
            "name": "round_number",
            "description": "Round a number to a given count of decimal places.",
            "parameters": {
                "type": "object",
                "properties": {"value": {"type": "number"}, "digits": {"type": "integer"}},
                "required": ["value", "digits"],
            },
        },
    },
}


def tool_defs(names):
    return [{"type": "function", "function": TOOLS[n]["schema"]} for n in names]


def run_tool(name, args):
    """Run a tool on already-typed arguments; returns the JSON text the tool message carries."""
    if name not in TOOLS:
        return json.dumps({"error": "no such tool"}, ensure_ascii=False)
    try:
        out = TOOLS[name]["fn"](**args)
    except Exception as e:  # bad arguments from the model
        out = {"error": type(e).__name__}
    return json.dumps(out, ensure_ascii=False)


def coerce_args(name, raw):
    """Typed arguments from raw <parameter> text, by the tool's JSON schema (as a server parser does)."""
    props = TOOLS[name]["schema"]["parameters"]["properties"] if name in TOOLS else {}
    out = {}
    for k, v in raw.items():
        t = props.get(k, {}).get("type", "string")
        if t == "string":
            out[k] = v
            continue
        if v.strip() == "null":
            out[k] = None
            continue
        try:
            val = json.loads(v)
        except Exception:
            out[k] = v
            continue
        if t == "integer" and isinstance(val, float) and val == int(val):
            val = int(val)
        out[k] = val
    return out


# ----------------------------------------------------------------------------------------
# Tasks: a user request, the expected call(s), reasoning and the final answer
# ----------------------------------------------------------------------------------------

def _fmt(x):
    return json.dumps(x, ensure_ascii=False)


def _rand_number(rng):
    r = rng.random()
    if r < 0.55:
        return rng.randint(2, 99)
    if r < 0.8:
        return rng.randint(100, 9999)
    if r < 0.9:
        return -rng.randint(1, 500)
    return round(rng.randint(1, 9999) / 10, 1)


OPS = {
    "add": ["What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a} + {b}.", "What do I get if I add {a} to {b}?",
            "Please sum {a} and {b}.", "{a} + {b} = ?", "Can you add {a} and {b} for me?"],
    "subtract": ["What is {a} minus {b}?", "Subtract {b} from {a}.", "Compute {a} - {b}.", "{a} - {b} = ?",
                 "What's the difference {a} - {b}?", "Take {b} away from {a}."],
    "multiply": ["What is {a} times {b}?", "Multiply {a} by {b}.", "Compute {a} * {b}.", "{a} x {b} = ?",
                 "What is the product of {a} and {b}?", "Can you multiply {a} and {b}?"],
    "divide": ["What is {a} divided by {b}?", "Divide {a} by {b}.", "Compute {a} / {b}.", "{a} / {b} = ?",
               "How much is {a} over {b}?"],
}
OP_SYM = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}


def task_calculate(rng):
    op = rng.choice(list(OPS))
    a, b = _rand_number(rng), _rand_number(rng)
    if op == "divide" and b == 0:
        b = 7
    q = rng.choice(OPS[op]).format(a=a, b=b)
    args = {"operation": op, "a": a, "b": b}
    res = tool_calculate(**args)["result"]
    think = rng.choice([
        "The user wants {a} {s} {b}. I will use the calculate tool with operation {op}.",
        "This is an arithmetic question: {op} {a} and {b}. I should call calculate.",
        "I need to {op} {a} and {b}, so I call calculate with a = {a} and b = {b}.",
    ]).format(a=a, b=b, s=OP_SYM[op], op=op)
    ans = rng.choice(["{a} {s} {b} = {r}.", "The result is {r}.", "The answer is {r}.", "That comes to {r}."]).format(
        a=a, b=b, s=OP_SYM[op], r=_fmt(res))
    return dict(query=q, calls=[("calculate", args)], think=think, key=[_fmt(res)], answer=ans,
                summary="the result is " + _fmt(res))


CONV_PAIRS = [("km", "mi"), ("mi", "km"), ("m", "ft"), ("ft", "m"), ("cm", "in"), ("in", "cm"), ("km", "m"),
              ("kg", "lb"), ("lb", "kg"), ("g", "oz"), ("oz", "g"), ("kg", "g"),
              ("l", "gal"), ("gal", "l"), ("ml", "l"),
              ("celsius", "fahrenheit"), ("fahrenheit", "celsius"), ("celsius", "kelvin"), ("kelvin", "celsius")]


def task_convert(rng):
    f, t = rng.choice(CONV_PAIRS)
    v = rng.randint(1, 500) if rng.random() < 0.75 else round(rng.randint(1, 5000) / 10, 1)
    fw, tw = rng.choice(UNIT_WORDS[f]), rng.choice(UNIT_WORDS[t])
    q = rng.choice(["Convert {v} {fw} to {tw}.", "How many {tw} is {v} {fw}?", "What is {v} {fw} in {tw}?",
                    "{v} {fw} in {tw}, please.", "I have {v} {fw}. How much is that in {tw}?"]).format(v=v, fw=fw, tw=tw)
    args = {"value": v, "from_unit": f, "to_unit": t}
    res = tool_convert_units(**args)["value"]
    think = rng.choice([
        "The user wants to convert {v} {f} to {t}. I will call convert_units.",
        "A unit conversion from {f} to {t}; convert_units with value {v} does this.",
    ]).format(v=v, f=f, t=t)
    ans = rng.choice(["{v} {fw} is {r} {tw}.", "That is {r} {tw}.", "It comes to {r} {tw}."]).format(
        v=v, fw=fw, tw=tw, r=_fmt(res))
    return dict(query=q, calls=[("convert_units", args)], think=think, key=[_fmt(res)], answer=ans,
                summary="{} {} is {} {}".format(v, fw, _fmt(res), tw))


FIELD_Q = {
    "capital": ["What is the capital of {c}?", "Which city is the capital of {c}?", "Tell me the capital of {c}."],
    "currency": ["What currency does {c} use?", "What is the currency of {c}?", "Which money is used in {c}?"],
    "continent": ["Which continent is {c} in?", "On what continent is {c}?", "Where is {c}: which continent?"],
    "population_millions": ["What is the population of {c}?", "How many people live in {c}?",
                            "How populous is {c}?"],
    "calling_code": ["What is the calling code of {c}?", "What is the phone prefix for {c}?",
                     "Which dialing code does {c} use?"],
}
FIELD_A = {
    "capital": ["The capital of {c} is {v}.", "{v} is the capital of {c}."],
    "currency": ["{c} uses the {v}.", "The currency of {c} is the {v}."],
    "continent": ["{c} is in {v}.", "{c} lies in {v}."],
    "population_millions": ["{c} has about {v} million people.", "The population of {c} is about {v} million."],
    "calling_code": ["The calling code of {c} is {v}.", "{c} uses {v}."],
}


def task_country(rng):
    c = rng.choice(sorted(COUNTRIES))
    field = rng.choice(COUNTRY_FIELDS)
    q = rng.choice(FIELD_Q[field]).format(c=c)
    args = {"country": c, "field": field}
    v = tool_lookup_country(**args)[field]
    think = rng.choice(["The user asks for the {f} of {c}. I will look it up with lookup_country.",
                        "I should check the reference table: lookup_country for {c}, field {f}."]).format(f=field, c=c)
    ans = rng.choice(FIELD_A[field]).format(c=c, v=v)
    return dict(query=q, calls=[("lookup_country", args)], think=think, key=[str(v)], answer=ans,
                summary="the {} of {} is {}".format(field.replace("_", " "), c, v))


def task_sort(rng):
    nums = [rng.randint(-50, 999) for _ in range(rng.randint(3, 7))]
    desc = rng.random() < 0.4
    lst = ", ".join(str(x) for x in nums)
    if desc:
        q = rng.choice(["Sort these numbers from largest to smallest: {l}.", "Order {l} in descending order.",
                        "Put {l} in decreasing order."]).format(l=lst)
    else:
        q = rng.choice(["Sort these numbers: {l}.", "Order {l} from smallest to largest.",
                        "Put {l} in ascending order.", "Can you sort {l}?"]).format(l=lst)
    args = {"numbers": nums, "descending": desc}
    res = ", ".join(str(x) for x in tool_sort_numbers(**args)["sorted"])
    think = "The user wants {} numbers sorted in {} order. I will call sort_numbers.".format(
        len(nums), "descending" if desc else "ascending")
    ans = rng.choice(["Sorted: {r}.", "Here they are in order: {r}.", "The sorted list is {r}."]).format(r=res)
    return dict(query=q, calls=[("sort_numbers", args)], think=think, key=[res], answer=ans,
                summary="sorted: " + res)


def task_prime(rng):
    n = rng.randint(2, 2000) if rng.random() < 0.7 else rng.choice([p for p in range(2, 400) if tool_is_prime(p)["prime"]])
    q = rng.choice(["Is {n} a prime number?", "Is {n} prime?", "Check whether {n} is prime.",
                    "Tell me if {n} is a prime."]).format(n=n)
    args = {"n": n}
    out = tool_is_prime(n)
    think = rng.choice(["The user asks whether {n} is prime. I will call is_prime.",
                        "Primality check for {n}: use the is_prime tool."]).format(n=n)
    if out["prime"]:
        ans = rng.choice(["Yes, {n} is prime.", "{n} is prime."]).format(n=n)
        key = ["{} is prime".format(n)]
        summary = "{} is prime".format(n)
    else:
        ans = rng.choice(["No, {n} is not prime.", "{n} is not prime; it is divisible by {d}."]).format(
            n=n, d=out.get("smallest_factor", 1))
        key = ["{} is not prime".format(n)]
        summary = "{} is not prime".format(n)
    return dict(query=q, calls=[("is_prime", args)], think=think, key=key, answer=ans, summary=summary)


def task_round(rng):
    v = round(rng.uniform(-100, 1000), rng.randint(3, 5))
    d = rng.randint(0, 2)
    q = rng.choice(["Round {v} to {d} decimal places.", "What is {v} rounded to {d} decimals?",
                    "Please round {v} to {d} digits after the point."]).format(v=v, d=d)
    args = {"value": v, "digits": d}
    r = tool_round_number(**args)["result"]
    think = "The user wants {v} rounded to {d} decimal places. I will call round_number.".format(v=v, d=d)
    ans = rng.choice(["{v} rounded to {d} decimal places is {r}.", "That is {r}.", "Rounded: {r}."]).format(
        v=v, d=d, r=_fmt(r))
    return dict(query=q, calls=[("round_number", args)], think=think, key=[_fmt(r)], answer=ans,
                summary="rounded it is " + _fmt(r))


TASKS = {"calculate": task_calculate, "convert_units": task_convert, "lookup_country": task_country,
         "sort_numbers": task_sort, "is_prime": task_prime, "round_number": task_round}

SYSTEM_PROMPTS = [
    "You are a careful assistant. Use the tools when they help.",
    "You are m2-tiny, a small assistant trained by the m2 project.",
    "Answer briefly and accurately.",
    "You are a helpful assistant that checks facts with tools before answering.",
    "Be concise.",
]

SMALLTALK = [
    (["Hi!", "Hello", "Hey there.", "Good morning!"], "The user is greeting me. No tool is needed.",
     ["Hello! How can I help you today?", "Hi! What can I do for you?"]),
    (["Thanks!", "Thank you.", "Great, thanks."], "The user is thanking me. No tool is needed.",
     ["You're welcome!", "Glad I could help."]),
    (["Who are you?", "What are you?"], "The user asks who I am. No tool is needed.",
     ["I am a small assistant model. I can answer questions and use tools.", "I am m2-tiny, a small language model."]),
]


def _smalltalk(rng, tool_names):
    if tool_names and rng.random() < 0.3:
        q = rng.choice(["What tools can you use?", "Which tools do you have?", "What can you do?"])
        return q, "The user asks about my tools. I can list them without calling any.", \
            "I can use these tools: " + ", ".join(tool_names) + "."
    qs, think, answers = rng.choice(SMALLTALK)
    return rng.choice(qs), think, rng.choice(answers)


def _call_msgs(task, call_id_base):
    tool_calls = [{"type": "function", "id": "call_%d" % (call_id_base + i),
                   "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(task["calls"])]
    results = [run_tool(n, a) for n, a in task["calls"]]
    return tool_calls, results


def make_conversation(rng, for_eval=False):
    """Returns (messages, tools, eval_task): eval_task is the last tool task (for the evaluator)."""
    n_tools = rng.randint(1, 3)
    tool_names = rng.sample(sorted(TOOLS), n_tools)
    use_tools = rng.random() < 0.9 or for_eval
    if not use_tools:
        tool_names = []
    msgs = []
    r = rng.random()
    if r < 0.4:
        msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    # training conversations hold more tool turns (more targets per rendered tool list); the
    # evaluation set keeps the original distribution, so its tasks stay the same
    n_turns = rng.choice([1, 1, 1, 2, 2, 3] if for_eval else [1, 2, 2, 3, 3, 4])
    last_task = None
    call_id = 0
    for turn in range(n_turns):
        is_last = turn == n_turns - 1
        want_tool = tool_names and (rng.random() < 0.85 or (for_eval and is_last))
        if not want_tool:
            q, think, ans = _smalltalk(rng, tool_names)
            msgs.append({"role": "user", "content": q})
            msgs.append({"role": "assistant", "content": ans, "reasoning_content": think})
            continue
        n_calls = 2 if (rng.random() < 0.15 and len(tool_names) >= 1) else 1
        tasks = [TASKS[rng.choice(tool_names)](rng) for _ in range(n_calls)]
        if n_calls == 1:
            t = tasks[0]
            query, think, answer = t["query"], t["think"], t["answer"]
        else:
            t1, t2 = tasks
            query = t1["query"] + " Also, " + t2["query"][0].lower() + t2["query"][1:]
            think = "The user has two requests. " + t1["think"] + " " + t2["think"] + " I can make both calls at once."
            answer = "First, " + t1["summary"] + ". Second, " + t2["summary"] + "."
        calls = [c for t in tasks for c in t["calls"]]
        task = dict(query=query, calls=calls, key=[k for t in tasks for k in t["key"]], n_msgs=None)
        msgs.append({"role": "user", "content": query})
        task["n_msgs"] = len(msgs)  # messages up to and including this user turn
        tool_calls, results = _call_msgs(dict(calls=calls), call_id)
        call_id += len(calls)
        pre = rng.choice(["", "", "", "Let me check.", "I'll use a tool for that."])
        msgs.append({"role": "assistant", "content": pre, "reasoning_content": think, "tool_calls": tool_calls})
        for tc, res in zip(tool_calls, results):
            msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": res})
        think2 = rng.choice(["The tool returned the answer. I can reply now.", "I have the result from the tool.",
                             "The tool result answers the question."])
        msgs.append({"role": "assistant", "content": answer, "reasoning_content": think2})
        last_task = task
    return msgs, tool_defs(tool_names), last_task


# ----------------------------------------------------------------------------------------
# Rendering with our template (the same environment transformers uses)
# ----------------------------------------------------------------------------------------

def jinja_env():
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.ext import loopcontrols

    def raise_exception(msg):
        raise ValueError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


_TEMPLATE_CACHE = {}


def render(messages, tools=None, add_generation_prompt=False, template_path=None, **extra):
    import os
    path = template_path or os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_template.jinja")
    if path not in _TEMPLATE_CACHE:
        with open(path, encoding="utf-8") as f:
            _TEMPLATE_CACHE[path] = jinja_env().from_string(f.read())
    return _TEMPLATE_CACHE[path].render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                        **extra)


if __name__ == "__main__":
    rng = random.Random(0)
    for _ in range(2):
        m, t, _task = make_conversation(rng)
        print(render(m, t))
        print("=" * 60)
