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
npm ci --no-audit --no-fund --prefer-offline
cp package-lock.json "$stamp"
echo "npm_ci: installed $(ls node_modules | wc -l) packages in $dest/node_modules"
