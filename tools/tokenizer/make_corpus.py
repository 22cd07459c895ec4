#!/usr/bin/env python3
"""Writes the tokenizer test corpus: testdata/tokenizer/corpus/<category>_<nnn>.txt.

Deterministic for a given Python version (English prose and Python/C code are taken from
the running interpreter's standard library: docstrings, .py sources and C headers; the
rest is generated here from a fixed seed). The committed corpus is the reference; rerun
only to change it, then rerun make_expected.py.

Categories: English prose, code (Python, C, JS, Rust, Go, SQL, shell, HTML, JSON),
Chinese, Japanese, emoji and ZWJ sequences, odd whitespace (tabs, CRLF, long runs,
Unicode spaces), numbers, contractions, special tokens (every added token of the
tokenizers given with --tokenizer), other scripts, and invalid UTF-8 (.txt files whose
bytes are deliberately ill-formed).

Usage: python3 tools/tokenizer/make_corpus.py [--out DIR] [--tokenizer tokenizer.json|x.tar.xz ...]
  (as committed: --tokenizer for ours/tokenizer.json, variants/*.json, third_party/*.tar.xz)
       python3 tools/tokenizer/make_corpus.py --train-text FILE   (text for training ours)
"""
import argparse
import glob
import inspect
import json
import os
import pkgutil
import random
import sys
import sysconfig
import tarfile
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# MiniMax-M2's special tokens (docs/MODEL_SPEC.md) and the chat markup around them.
M2_SPECIALS = ["]!p~[", "]~b]", "[e~[", "]!d~[", "]~!b[", "<think>", "</think>",
               "<minimax:tool_call>", "</minimax:tool_call>"]

ZH = [
    "今天天气很好，我们一起去公园散步吧。",
    "机器学习是人工智能的一个重要分支，它研究计算机如何从数据中学习。",
    "这个模型使用了混合专家结构，每个词元只激活一小部分参数。",
    "请把下面的句子翻译成英文，并解释其中的语法。",
    "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    "他说：“如果明天不下雨，我们就去爬山。”",
    "分词器把文本切成词元，再把词元映射成整数编号。",
    "长江是亚洲第一长河，全长约六千三百公里。",
    "我昨天买了三本书，其中一本是关于历史的。",
    "程序员在调试代码时发现了一个内存泄漏的问题。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
    "数据库的索引可以显著提高查询速度，但会增加写入的开销。",
    "请注意：本系统将于今晚十点进行维护，预计持续两个小时。",
    "她每天早上六点起床，先跑步半小时，然后吃早饭。",
    "深度神经网络的训练需要大量的计算资源和高质量的数据。",
    "这家餐厅的饺子非常好吃，价格也很便宜。",
    "学而时习之，不亦说乎？有朋自远方来，不亦乐乎？",
    "推理引擎的吞吐量取决于批处理大小和显存带宽。",
    "繁體中文與簡體中文在字形上有許多差異。",
    "我們應該尊重每一個人的選擇和自由。",
    "第一章　总则　第一条　为了规范管理，制定本办法。",
    "（一）提高效率；（二）降低成本；（三）保证质量。",
]

JA = [
    "今日はとても良い天気ですね。散歩に行きましょう。",
    "東京は日本の首都で、世界有数の大都市です。",
    "このプログラムはトークナイザーの速度を測定します。",
    "私は毎朝コーヒーを飲みながらニュースを読みます。",
    "機械学習モデルの推論には大量のメモリが必要です。",
    "吾輩は猫である。名前はまだ無い。",
    "ひらがなとカタカナと漢字を組み合わせて書きます。",
    "コンピュータ・サイエンスの基礎を勉強しています。",
    "すみません、駅までの道を教えていただけますか？",
    "古池や蛙飛び込む水の音",
    "彼女は「ありがとう」と言って、にっこり笑った。",
    "ラーメン、寿司、天ぷらは日本料理の代表です。",
    "新しいバージョンでは、バグが修正されました。",
    "ｶﾀｶﾅの半角文字も時々使われます。",
    "日本語の文章には、句読点として「、」と「。」を使います。",
    "明日の会議は午後三時からに変更になりました。",
    "한국어 문장도 조금 섞어 봅니다. 안녕하세요, 반갑습니다.",
]

EMOJI = ["😀", "😂", "🥲", "🤖", "🚀", "🔥", "✨", "❤️", "👍", "👍🏽", "👍🏿", "🎉", "🇯🇵", "🇨🇳",
         "🇺🇸", "🏳️‍🌈", "🏴‍☠️", "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏾‍🚀", "👨‍❤️‍💋‍👨", "🫶", "🫠", "1️⃣", "#️⃣",
         "©️", "™️", "🐈‍⬛", "🐻‍❄️", "❤️‍🔥", "🧔‍♀️", "🏃‍♂️‍➡️", "🫱🏻‍🫲🏿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "☺", "✈︎"]

SPACES = [" ", "  ", "\t", "\t\t", "\n", "\r\n", "\n\n", "\r", "\u00a0", "\u3000", "\u2003",
          "\u2009", "\u200b", "\u0085", "\u2028", "\u2029", "\u202f", "\u205f", "\u1680",
          "\u180e", "\ufeff", "\x0b", "\x0c", " \n", "\n ", "\t\n", " \t "]

WORDS = ("the of and to in is was for on that with as by at from this be are it an not or "
         "which have has had but were all their can one more will its also other would about "
         "model token text engine memory cache layer weight expert router attention batch "
         "server request stream decode encode buffer thread kernel vector matrix value").split()

CONTRACTIONS = ["I'm", "you're", "we've", "they'll", "she'd", "it's", "don't", "can't", "won't",
                "I'M", "YOU'RE", "WE'VE", "THEY'LL", "SHE'D", "IT'S", "DON'T", "Ma'am", "o'clock",
                "rock'n'roll", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE",
                "'Ve", "'lL", "'D", "it\u2019s", "don\u2019t", "x'ſ", "a'K", "'\u017f", "L'été",
                "l'homme", "dell'arte", "''", "'''", "' s", "'123", "O'Neil's", "y'all'd've"]

NUMBERS = ["0", "7", "42", "123", "1234", "12345", "123456789", "3.14159", "2.71828e-10",
           "1,000,000", "1_000_000", "0x7fffffff", "0b1011", "1e9", "-17", "+3", "98.6°F",
           "2025-01-31", "12:34:56", "+1 (555) 010-9999", "１２３４５", "٣٤٥", "१२३",
           "½", "²³", "Ⅻ", "⑦", "3rd", "100%", "$19.99", "€5,00", "¥1000", "v1.2.3", "192.168.0.1"]


def chunks(text, size, rng):
    out = []
    i = 0
    while i < len(text):
        n = rng.randint(size // 2, size * 3 // 2)
        out.append(text[i:i + n])
        i += n
    return out


def english_docs(rng, target):
    """Docstrings of standard-library modules, classes and functions: real English prose."""
    texts = []
    names = sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith("_"))
    warnings.simplefilter("ignore")
    for name in names:
        if name in ("antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle") or "test" in name:
            continue
        try:
            mod = __import__(name)
        except Exception:
            continue
        # Only the standard library (not site-packages, nor the scripts beside this one).
        if not (getattr(mod, "__file__", "") or "").startswith(sysconfig.get_paths()["stdlib"]) or \
                "site-packages" in mod.__file__:
            continue
        doc = inspect.getdoc(mod) or ""
        parts = [doc]
        for attr in sorted(dir(mod))[:40]:
            d = inspect.getdoc(getattr(mod, attr, None)) if not attr.startswith("_") else None
            if d and len(d) > 80 and d not in parts:
                parts.append(d)
        texts.append("\n\n".join(p for p in parts if p))
        if sum(len(t) for t in texts) > target:
            break
    return chunks("\n\n".join(texts)[:target], 6000, rng)


def stdlib_files(pattern, target, rng, size):
    files = sorted(glob.glob(pattern))
    rng.shuffle(files)
    out, total = [], 0
    for f in files:
        try:
            text = open(f, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        text = text[:12000]
        out.append(text)
        total += len(text)
        if total > target:
            break
    return [c for t in out for c in chunks(t, size, rng)]


def ident(rng):
    parts = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    style = rng.randint(0, 2)
    if style == 0:
        return "_".join(parts)
    if style == 1:
        return parts[0] + "".join(p.title() for p in parts[1:])
    return "".join(p.title() for p in parts)


def other_code(rng, n):
    """Small programs in several languages with random identifiers and literals."""
    docs = []
    for _ in range(n):
        lines = []
        for _ in range(rng.randint(20, 60)):
            a, b, c = ident(rng), ident(rng), ident(rng)
            k = rng.randint(0, 1 << 20)
            lang = rng.randint(0, 8)
            lines.append([
                f"function {a}({b}, {c}) {{\n  const {a}_{k} = {b}?.{c} ?? [];\n  return {b}.map(x => x * {k}).filter(Boolean);\n}}",
                f"fn {a}(&mut self, {b}: &[u8]) -> Result<Vec<{b.title()}>, Error> {{\n    let {c} = {b}.iter().map(|x| *x as u32 + {k}).collect::<Vec<_>>();\n    Ok({c})\n}}",
                f"func {a.title()}({b} []byte) (int, error) {{\n\tif len({b}) == 0 {{\n\t\treturn 0, fmt.Errorf(\"empty {c}: %d\", {k})\n\t}}\n\treturn {k}, nil\n}}",
                f"SELECT {a}, COUNT(*) AS n FROM {b} WHERE {c} >= {k} AND {a} LIKE '%{c}%' GROUP BY {a} ORDER BY n DESC;",
                f"for f in ./{a}/*.txt; do\n  grep -E '^[0-9]+' \"$f\" | awk '{{print $1}}' >> /tmp/{b}.log 2>&1 || echo \"fail: $f\"\ndone",
                f"<div class=\"{a}\" data-id=\"{k}\">\n  <a href=\"https://example.com/{b}?q={c}&amp;n={k}\">{b}</a>\n</div>",
                json.dumps({a: {b: [k, k / 7, None, True], c: "\u00e9\u4e2d\U0001F600"}}, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 2, 4])),
                f"template <typename T>\nstd::vector<T> {a}(const std::span<const T> {b}) {{\n  std::vector<T> {c}({b}.begin(), {b}.end());\n  std::sort({c}.begin(), {c}.end()); // {k}\n  return {c};\n}}",
                f"#define {a.upper()}_{k} ((uint64_t){k}ull << 3)\nstatic inline int {a}(int *{b}) {{ return *{b} >> 2 ^ 0x{k:x}; }}",
            ][lang])
        docs.append("\n\n".join(lines) + "\n")
    return docs


def zh_docs(rng, n):
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(30, 90)):
            r = rng.random()
            if r < 0.75:
                parts.append(rng.choice(ZH))
            elif r < 0.9:
                parts.append("".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(2, 12))) + "。")
            else:
                parts.append(f"{rng.choice(WORDS)} {rng.randint(0, 9999)} ")
            if rng.random() < 0.15:
                parts.append("\n")
        docs.append("".join(parts))
    return docs


def ja_docs(rng, n):
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(30, 90)):
            r = rng.random()
            if r < 0.75:
                parts.append(rng.choice(JA))
            elif r < 0.85:
                parts.append("".join(chr(rng.randint(0x3041, 0x3096)) for _ in range(rng.randint(2, 10))))
            elif r < 0.95:
                parts.append("".join(chr(rng.randint(0x30A1, 0x30FA)) for _ in range(rng.randint(2, 10))) + "ー")
            else:
                parts.append(f" {rng.choice(WORDS)}{rng.randint(0, 99)} ")
            if rng.random() < 0.1:
                parts.append("\n")
        docs.append("".join(parts))
    return docs


def emoji_docs(rng, n):
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(100, 300)):
            r = rng.random()
            if r < 0.5:
                parts.append(rng.choice(EMOJI) * rng.randint(1, 3))
            elif r < 0.8:
                parts.append(" " + rng.choice(WORDS))
            elif r < 0.9:
                # Unusual sequences: lone ZWJ, lone modifiers, regional indicators, VS16.
                parts.append(rng.choice(["\u200d", "\U0001F3FB", "\U0001F1E6\U0001F1E7\U0001F1E8", "\ufe0f", "\u20e3", "a\u0301\u0302"]))
            else:
                parts.append(rng.choice(SPACES))
        docs.append("".join(parts))
    return docs


def whitespace_docs(rng, n):
    docs = []
    for i in range(n):
        parts = []
        for _ in range(rng.randint(50, 200)):
            r = rng.random()
            if r < 0.35:
                parts.append(rng.choice(SPACES) * rng.randint(1, 6))
            elif r < 0.4:
                parts.append(rng.choice([" ", "\t", "\n", "\r\n", "\u3000"]) * rng.randint(50, 3000))
            elif r < 0.8:
                parts.append(rng.choice(WORDS) + rng.choice(["", ".", ",", ":", "!?"]))
            else:
                parts.append(rng.choice(["\tdef f():\r\n\t\treturn 1\r\n", "line one  \nline two\t\n", "  indented\n    more\n",
                                         "trailing   ", "   ", "a\u00a0b\u00a0\u00a0c", "x\u2028y\u2029z", "\u0085n\u0085"]))
        docs.append("".join(parts))
    # One document is a single very long run, to exercise long pieces.
    docs.append(" " * 20000 + "end" + "\n" * 5000 + "\t" * 3000 + "x")
    return docs


def number_docs(rng, n):
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(100, 300)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(NUMBERS))
            elif r < 0.7:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 30))))
            elif r < 0.8:
                parts.append(f"{rng.random() * 10 ** rng.randint(-5, 10):.{rng.randint(0, 8)}f}")
            else:
                parts.append(rng.choice(WORDS))
            parts.append(rng.choice([" ", ", ", "\n", "", "-", "/"]))
        docs.append("".join(parts))
    return docs


def contraction_docs(rng, n):
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(100, 300)):
            r = rng.random()
            if r < 0.5:
                parts.append(rng.choice(CONTRACTIONS))
            else:
                parts.append(rng.choice(WORDS).upper() if rng.random() < 0.2 else rng.choice(WORDS))
            parts.append(rng.choice([" ", " ", "\n", "", ", "]))
        docs.append("".join(parts))
    return docs


def special_docs(rng, specials):
    """Every special/added token alone, glued to text, with spaces around, and broken."""
    docs = []
    doc = []
    for i, s in enumerate(specials):
        if i >= 120:  # long lists (DeepSeek's 800 placeholders): each once, glued to text
            doc.append(f"a{s} ")
            continue
        doc.append(s)
        doc.append(f"x{s}y {s} \n{s}\n  {s}  word{s}word {s}{s}")
        if len(s) > 2:
            doc.append(" " + s[:-1] + " " + s[1:] + " ")
    docs.append("\n".join(doc))
    # Chat-formatted conversations in the MiniMax-M2 template.
    for _ in range(6):
        conv = ["]~!b[]~b]system\nYou are a helpful assistant.[e~[\n"]
        for _ in range(rng.randint(2, 6)):
            conv.append(f"]~b]user\n{rng.choice(ZH + JA)} {' '.join(rng.choice(WORDS) for _ in range(12))}[e~[\n")
            conv.append("]~b]ai\n<think>\nThe user asks about " + " ".join(rng.choice(WORDS) for _ in range(20)) +
                        ".\n</think>\n\n" + " ".join(rng.choice(WORDS) for _ in range(30)) +
                        '\n<minimax:tool_call>\n<invoke name="search">\n<parameter name="query">' +
                        rng.choice(WORDS) + '</parameter>\n</invoke>\n</minimax:tool_call>[e~[\n')
        docs.append("".join(conv))
    mixed = []
    for _ in range(400):
        mixed.append(rng.choice(specials) if rng.random() < 0.4 else rng.choice(WORDS + SPACES + EMOJI))
    docs.append("".join(mixed))
    return docs


def script_docs(rng, n):
    """Other scripts and combining marks, assigned code points from many blocks."""
    blocks = [(0x0100, 0x017F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x05FF), (0x0600, 0x06FF),
              (0x0900, 0x097F), (0x0E00, 0x0E7F), (0xAC00, 0xD7A3), (0x0300, 0x036F), (0x1E00, 0x1EFF),
              (0x2000, 0x206F), (0x2190, 0x22FF), (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0xE000, 0xE0FF)]
    words = ["Привет мир", "Γειά σου κόσμε", "שלום עולם", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก",
             "Xin chào thế giới", "Ünïcödé façade naïve coöperate", "ǅungla ǈudi", "ﬁne ﬂow ﬃ", "Straße STRASSE",
             "İstanbul ıi", "𝐁𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐", "ℌ𝔢𝔩𝔩𝔬", "Ａｂｃ１２３", "e\u0301 e\u0301\u0301 \u00e9", "Å Å Å", "각 각"]
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(100, 250)):
            if rng.random() < 0.5:
                parts.append(rng.choice(words))
            else:
                lo, hi = rng.choice(blocks)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
            parts.append(rng.choice([" ", "\n", "", ". "]))
        docs.append("".join(parts))
    return docs


def invalid_docs(rng, n):
    """Bytes that are not UTF-8. The engine repairs them (one U+FFFD per maximal
    subpart); the expected ids come from HF on bytes.decode('utf-8', 'replace')."""
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3", b"\xe2\x82",
           b"\xf0\x9f", b"\x80\x80\x80", b"\xc3\xc3\xa9", b"\xe4\xb8\xe4\xb8\xad"]
    docs = []
    for i in range(n):
        parts = []
        for _ in range(rng.randint(100, 300)):
            r = rng.random()
            if r < 0.3:
                parts.append(rng.choice(bad))
            elif r < 0.6:
                parts.append((" " + rng.choice(WORDS)).encode())
            else:
                parts.append(rng.choice(ZH + JA + EMOJI + CONTRACTIONS).encode())
        data = b"".join(parts)
        if i % 2 == 0:
            data += rng.choice([b"\xe4", b"\xf0\x9f\x98", b"\xc3"])  # truncated at the very end
        docs.append(data)
    return docs


def mixed_docs(rng, n):
    docs = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(60, 150)):
            r = rng.random()
            src = ZH if r < 0.2 else JA if r < 0.35 else EMOJI if r < 0.45 else CONTRACTIONS if r < 0.55 else NUMBERS if r < 0.65 else None
            if src:
                parts.append(rng.choice(src))
            else:
                parts.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).capitalize() + ". ")
            if rng.random() < 0.1:
                parts.append(rng.choice(["\n\n", "\n- ", "\n## ", "\n```python\nprint('hi')\n```\n", " https://example.org/a/b?c=d#e "]))
        docs.append("".join(parts))
    return docs


def added_token_contents(paths):
    out = []
    for p in paths:
        if p.endswith(".tar.xz"):
            with tarfile.open(p) as tar:
                member = next(m for m in tar.getnames() if m.endswith("tokenizer.json"))
                spec = json.load(tar.extractfile(member))
        else:
            spec = json.load(open(p, encoding="utf-8"))
        for t in spec.get("added_tokens") or []:
            if t["content"] not in out:
                out.append(t["content"])
    return out


def build(rng, specials, scale=1.0):
    lib = sysconfig.get_paths()["stdlib"]
    inc = sysconfig.get_paths()["include"]
    k = lambda n: max(1, int(n * scale))
    return {
        "english": english_docs(rng, k(320_000)),
        "python": stdlib_files(os.path.join(lib, "*.py"), k(150_000), rng, 5000),
        "c": stdlib_files(os.path.join(inc, "*.h"), k(70_000), rng, 5000),
        "code": other_code(rng, k(30)),
        "zh": zh_docs(rng, k(36)),
        "ja": ja_docs(rng, k(32)),
        "emoji": emoji_docs(rng, k(12)),
        "space": whitespace_docs(rng, k(12)),
        "numbers": number_docs(rng, k(12)),
        "contractions": contraction_docs(rng, k(8)),
        "special": special_docs(rng, specials),
        "scripts": script_docs(rng, k(12)),
        "invalid": invalid_docs(rng, k(10)),
        "mixed": mixed_docs(rng, k(14)),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "testdata", "tokenizer", "corpus"))
    ap.add_argument("--tokenizer", action="append", default=[], help="add every added token of this file")
    ap.add_argument("--train-text", help="write a different-seed text for training our tokenizer instead")
    args = ap.parse_args()

    if args.train_text:
        docs = build(random.Random(20240607), M2_SPECIALS, scale=1.5)
        with open(args.train_text, "wb") as f:
            for cat, items in docs.items():
                if cat in ("invalid", "special"):
                    continue
                for d in items:
                    f.write(d.encode("utf-8") if isinstance(d, str) else d)
                    f.write(b"\n")
        return

    specials = list(M2_SPECIALS)
    for c in added_token_contents(args.tokenizer):
        if c not in specials:
            specials.append(c)
    docs = build(random.Random(1234), specials)
    os.makedirs(args.out, exist_ok=True)
    for old in glob.glob(os.path.join(args.out, "*.txt")):
        os.remove(old)
    total = 0
    for cat, items in docs.items():
        for i, d in enumerate(items):
            data = d.encode("utf-8") if isinstance(d, str) else d
            with open(os.path.join(args.out, f"{cat}_{i:03d}.txt"), "wb") as f:
                f.write(data)
            total += len(data)
    print(f"wrote {sum(len(v) for v in docs.values())} documents, {total} bytes, to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
