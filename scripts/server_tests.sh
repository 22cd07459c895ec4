#!/usr/bin/env bash
# End-to-end tests of `m2 serve` with the official openai and anthropic Python SDKs
# (tests/server/sdk_test.py, pytest).
#   scripts/server_tests.sh [M2_BINARY]    default: build/src/cli/m2
# Makes a virtual environment in build/venv-server once (needs python3-venv, see
# scripts/install_deps.sh, and PyPI for the first run) and reuses it. Exits with pytest's
# code. M2_SANITIZED=1 (a sanitizer build) gives longer timeouts and a smaller load test.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -ge 1 ]; then
  bin="$(realpath -m -- "$1")"  # relative to where the script was started
else
  bin="$root/build/src/cli/m2"
fi
cd "$root"
if [ ! -x "$bin" ]; then
  echo "server_tests: no m2 binary at $bin (build it: ninja -C build m2)" >&2
  exit 2
fi

venv="$root/build/venv-server"
py="$venv/bin/python"
if [ ! -x "$py" ] || ! "$py" -c "import sys" 2>/dev/null || ! "$py" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  mkdir -p "$root/build"
  if ! python3 -m venv "$venv"; then
    rm -rf "$venv"
    echo "server_tests: python3 -m venv failed (Debian: apt-get install python3-venv, or scripts/install_deps.sh)" >&2
    exit 2
  fi
fi
if ! "$py" -c "import openai, anthropic, pytest, requests" 2>/dev/null; then
  echo "server_tests: installing openai anthropic pytest requests into $venv" >&2
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip install -q openai anthropic pytest requests
fi

export M2_BINARY="$bin"
export PYTHONDONTWRITEBYTECODE=1
set +e
"$py" -m pytest -q -p no:cacheprovider tests/server/sdk_test.py
code=$?
exit $code
