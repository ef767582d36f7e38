#!/usr/bin/env bash
# Fails when src/gen/ is not what `npm run generate` makes of protos/ now: regenerates into
# a temporary directory (with the same pinned buf and ts-proto) and compares.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
sed "s#out: runtimes/typescript/src/gen#out: $tmp/gen#" "$here/buf.gen.yaml" > "$tmp/buf.gen.yaml"
cd "$root"
"${BUF:-.venv/bin/buf}" generate --template "$tmp/buf.gen.yaml"
if ! diff -r "$tmp/gen" "$here/src/gen" >"$tmp/diff"; then
  head -40 "$tmp/diff" >&2
  echo "stale generated code: runtimes/typescript/src/gen differs from protos/ (run: npm run generate)" >&2
  exit 1
fi
echo "runtimes/typescript/src/gen is up to date"
