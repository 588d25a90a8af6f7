#!/usr/bin/env bash
# npm_ci.sh SOURCE_DIR DEST_DIR: copies the client tests (package.json, package-lock.json, *.mjs,
# *.sh) from SOURCE_DIR to DEST_DIR and runs `npm ci` there, unless DEST_DIR/node_modules already
# came from this very lock. The ctest fixture clients.npm_ci; the .mjs files run from DEST_DIR so
# that `import "openai"` resolves from DEST_DIR/node_modules.
set -euo pipefail
src=$1 dest=$2
mkdir -p "$dest"
cp "$src"/package.json "$src"/package-lock.json "$dest"/
cp "$src"/*.mjs "$src"/*.sh "$dest"/
stamp=$dest/node_modules/.molt-package-lock.json
if [ -d "$dest/node_modules" ] && [ -f "$stamp" ] && cmp -s "$stamp" "$dest/package-lock.json"; then
  echo "npm_ci: $dest/node_modules is up to date with package-lock.json"
  exit 0
fi
cd "$dest"
# Without the npm registry (offline, or a TLS proxy this machine's CA bundle does not trust) the
# Node client tests cannot run: they are skipped (exit 77) with the reason, never passed. Any
# other npm failure (a broken lock, a bad package) fails.
log=$(mktemp)
if ! npm ci --no-audit --no-fund --prefer-offline 2>&1 | tee "$log"; then
  if grep -Eq 'ENOTFOUND|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EAI_AGAIN|ENETUNREACH|CERT|certificate' "$log"; then
    echo "npm_ci: SKIPPED: the npm registry is unreachable from here ($(grep -Eom1 'ENOTFOUND|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EAI_AGAIN|ENETUNREACH|[A-Z_]*CERT[A-Z_]*|certificate[a-z ]*' "$log")); clients.openai_stream and clients.page are skipped too"
    rm -f "$log"
    exit 77
  fi
  rm -f "$log"
  exit 1
fi
rm -f "$log"
cp package-lock.json "$stamp"
echo "npm_ci: installed $(ls node_modules | wc -l) packages in $dest/node_modules"
