#!/usr/bin/env bash
# Installs the Debian packages molt needs to build and test. Idempotent and
# non-interactive: does nothing when every package is present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git
  libopenblas-openmp-dev                 # GEMM (OpenMP flavour: no thread fights on 2 cores)
  liblapack-dev liblapacke-dev           # Cholesky solve for the ridge maps (lapack.h is in liblapacke-dev)
  libhwy-dev                             # portable SIMD with runtime dispatch
  libdnnl-dev                            # oneDNN: bf16 prefill GEMM (AVX-512 BF16, AMX)
  libpcre2-dev libutf8proc-dev           # Unicode pre-tokenizer regex, NFC
  nlohmann-json3-dev libcli11-dev libfmt-dev
  libssl-dev                             # SHA-256 (libcrypto)
  libcpp-httplib-dev                     # molt serve (HTTP/1.1, chunked streaming)
  libgtest-dev libgmock-dev libbenchmark-dev
  gfortran                               # libgfortran.so: linking libmolt.a statically pulls OpenBLAS/LAPACK's Fortran runtime
)
# The server's client tests: the official openai npm package runs on Node (npm installs it from
# tests/clients/package-lock.json), curl and jq speak to it from a shell, the page runs in Chromium.
# A machine that already has node and npm (e.g. NodeSource's build) keeps them.
packages+=(curl jq chromium)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi
# Extra packages a caller may ask for, e.g. MOLT_EXTRA_PACKAGES="python3-torch".
read -r -a extra <<<"${MOLT_EXTRA_PACKAGES:-}"
packages+=("${extra[@]}")

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
