#!/usr/bin/env bash
# Lets this machine run arm64 programs directly: registers qemu-user's aarch64 emulator with the
# kernel's binfmt_misc, so a test that starts `molt` (or molt starting itself) runs it under
# qemu as a native binary would run. Idempotent; needs root (or sudo) the first time.
set -euo pipefail

qemu=/usr/bin/qemu-aarch64-static
[[ -x $qemu ]] || { echo "arm64-binfmt: $qemu missing: run scripts/install-deps.sh arm64" >&2; exit 1; }
dir=/proc/sys/fs/binfmt_misc
entry=$dir/qemu-aarch64
if [[ -e $entry ]] && grep -q '^enabled' "$entry"; then exit 0; fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "arm64-binfmt: need root or sudo to register $qemu" >&2; exit 1; }
  sudo=(sudo)
fi
if [[ ! -e $dir/register ]]; then
  "${sudo[@]}" mount -t binfmt_misc binfmt_misc "$dir"
fi
if [[ -e $entry ]]; then
  echo 1 | "${sudo[@]}" tee "$entry" >/dev/null  # registered but disabled: enable it
  exit 0
fi
# An aarch64 ELF executable or shared object (e_machine 0xb7). F: the kernel opens the emulator
# now, so it also serves chroots and containers that lack it.
magic='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
echo ":qemu-aarch64:M::$magic:$mask:$qemu:F" | "${sudo[@]}" tee "$dir/register" >/dev/null
echo "arm64-binfmt: registered $qemu for aarch64 executables"
