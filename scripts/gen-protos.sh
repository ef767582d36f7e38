#!/usr/bin/env bash
# Generates the Python code of protos/ (messages, gRPC stubs, mypy stubs) into
# src/steward/v1/. The generated files are committed so that the package works from a
# plain install; `gen-protos.sh --check` (run by `make lint`) fails when they are stale.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export PATH="$(dirname "$PY"):$PATH"
out=src
if [[ "${1:-}" == "--check" ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mapfile -t protos < <(find protos -name '*.proto' | sort)
"$PY" -m grpc_tools.protoc -Iprotos \
  --python_out="$out" --grpc_python_out="$out" \
  --mypy_out="$out" --mypy_grpc_out="$out" \
  "${protos[@]}"
if [[ "${1:-}" == "--check" ]]; then
  stale=0
  for f in "$out"/steward/v1/*; do
    name=${f#"$out"/}
    if ! cmp -s "$f" "src/$name"; then
      echo "stale generated code: src/$name differs from protos/ (run: make protos)" >&2
      stale=1
    fi
  done
  exit $stale
fi
echo "generated: $(ls src/steward/v1/ | grep -v __init__ | tr '\n' ' ')"
