#!/usr/bin/env bash
# Installs the Debian 12 packages the engine and its tests need (run as root).
# Idempotent: packages already present are left alone.
set -euo pipefail
pkgs=(
  cmake ninja-build g++ pkg-config          # build
  nlohmann-json3-dev libfmt-dev libcli11-dev libpcre2-dev libicu-dev   # libraries
  libcpp-httplib-dev                        # m2 serve (HTTP/1.1)
  python3-venv                              # the server tests drive it with the openai / anthropic SDKs
  libgtest-dev libgmock-dev                 # tests
  libopenmpi-dev openmpi-bin curl           # --parallel (one model over MPI ranks) and its mpirun test
  clang libclang-rt-14-dev                  # libFuzzer + sanitizer runtimes for scripts/fuzz.sh
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
