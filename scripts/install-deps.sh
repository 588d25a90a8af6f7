#!/usr/bin/env bash
# Installs the Debian packages molt needs to build and test. Idempotent and
# non-interactive: does nothing when every package is present.
#   scripts/install-deps.sh          the native build (make build / test / demo)
#   scripts/install-deps.sh arm64    the arm64 cross-build and qemu-user to run it (make arm64-test)
set -euo pipefail
target=${1:-native}
[[ $target == native || $target == arm64 ]] || { echo "install-deps: unknown target '$target' (native or arm64)" >&2; exit 2; }

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
# arm64: GCC's cross compiler, qemu-user, and the build's libraries as :arm64 (multiarch). oneDNN
# stays out (Debian's arm64 build has no bf16 matmul, and libdnnl-dev:arm64 cannot be installed
# beside libdnnl-dev): the arm64 preset builds with MOLT_DNNL=OFF.
if [[ $target == arm64 ]]; then
  packages=(cmake make pkg-config g++-aarch64-linux-gnu libgfortran-12-dev-arm64-cross qemu-user-static
            nlohmann-json3-dev libcli11-dev)
  for p in libopenblas-openmp-dev liblapack-dev liblapacke-dev libhwy-dev libpcre2-dev libutf8proc-dev \
           libfmt-dev libssl-dev libcpp-httplib-dev libgtest-dev libgmock-dev; do
    packages+=("$p:arm64")
  done
fi
# Extra packages a caller may ask for, e.g. MOLT_EXTRA_PACKAGES="python3-torch".
read -r -a extra <<<"${MOLT_EXTRA_PACKAGES:-}"
packages+=("${extra[@]}")

# A bare name means this machine's architecture (or an Architecture: all package): with arm64
# added, dpkg-query answers for every installed architecture of it, one line each.
native_arch=$(dpkg --print-architecture)
missing=()
for p in "${packages[@]}"; do
  want=$native_arch
  [[ $p == *:* ]] && want=${p#*:}
  status=$(dpkg-query -W -f='${Status}|${Architecture}\n' "$p" 2>/dev/null || true)
  grep -qxE "install ok installed\|($want|all)" <<<"$status" || missing+=("$p")
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
if [[ $target == arm64 ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  "${sudo[@]}" dpkg --add-architecture arm64
fi
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
