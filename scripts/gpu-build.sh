#!/usr/bin/env bash
# Builds the binaries scripts/gpu-check.sh runs into .gpu/bin/: every test target (unit and integration, benches
# included, as `cargo test --no-run` builds them) as test-<target>, every example as example-<name>, release mode.
# Run it where Rust is installed; copy .gpu/ to a GPU machine that has none.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .gpu/bin
list() { # cargo args...
  cargo "$@" --workspace --release --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        t = m["target"]
        kind = "test" if m["profile"]["test"] else t["kind"][0]
        print(kind, t["name"], m["executable"])'
}
{ list test --no-run; list build --examples; } | sort -u | while read -r kind name exe; do
  dst=".gpu/bin/$kind-$name"
  [ -e "$dst" ] && [ "$kind" = test ] && dst="$dst-$(basename "$exe")"
  cp "$exe" "$dst"
  echo "$kind $name -> $dst"
done
