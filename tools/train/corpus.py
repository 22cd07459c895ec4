"""Offline text sources for m2-tiny: source code found on this machine plus synthetic chats.

Code: the Python standard library of the running interpreter (*.py, no site-packages) and C
headers under /usr/include. Files are listed in sorted order and split into train / held-out
by a hash of their path, so the split is stable across runs and machines with the same files.
"""

import os
import sys
import sysconfig
import zlib

MAX_FILE_BYTES = 200_000


def _walk(root, suffixes, skip_dirs=()):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs and not d.startswith("."))
        for fn in sorted(filenames):
            if fn.endswith(suffixes):
                out.append(os.path.join(dirpath, fn))
    return out


def code_files():
    std = sysconfig.get_paths()["stdlib"]
    py = _walk(std, (".py",), skip_dirs=("site-packages", "__pycache__", "dist-packages", "idlelib", "lib2to3"))
    c = _walk("/usr/include", (".h",)) if os.path.isdir("/usr/include") else []
    return py, c


def is_heldout(path):
    return zlib.crc32(path.encode()) % 40 == 0


def read_text(path):
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            return None
        with open(path, "rb") as f:
            b = f.read()
        t = b.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "\x00" in t or len(t) < 200:
        return None
    return t


def load_code(max_py_bytes, max_c_bytes, heldout):
    """Texts of code files (train or held-out part), up to the byte budgets, in a fixed order."""
    py, c = code_files()
    texts = []
    for files, budget in ((py, max_py_bytes), (c, max_c_bytes)):
        used = 0
        for p in files:
            if is_heldout(p) != heldout:
                continue
            t = read_text(p)
            if t is None:
                continue
            texts.append(t)
            used += len(t)
            if used >= budget:
                break
    return texts


if __name__ == "__main__":
    py, c = code_files()
    print(sys.version, len(py), "py files", len(c), "headers")
