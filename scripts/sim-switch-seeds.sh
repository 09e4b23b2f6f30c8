#!/usr/bin/env bash
# Prints, for each sabotage switch of the broken build (src/core/unsafe.ts), the first seed of
# 1..N (default 1000) at which the simulator finds it, with the finding: the values to pin in
# test/sim/simulation.test.ts (FOUND_AT) and docs/simulation.md after a change shifts the seeds.
#   bash scripts/sim-switch-seeds.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-1000}"
npm run build --silent
switches=$(node --input-type=module -e \
  "import('./dist/core/unsafe.js').then((m) => console.log(m.SAFEGUARDS.join(' ')))")
for sw in $switches; do
  out=$(NODE_ENV=test RECKON_UNSAFE_DISABLE_SAFEGUARD="$sw" \
    node dist/cli/main.js sim --seeds "$n" --no-shrink 2>/dev/null || true)
  seed=$(grep -oE '^seed [0-9]+:$' <<<"$out" | head -n 1 | grep -oE '[0-9]+' || true)
  finding=$(grep -m 1 -E '^  - ' <<<"$out" | sed -E 's/^  - //' || true)
  printf '%-26s %-8s %s\n' "$sw" "${seed:-none}" "${finding:-not found within $n seeds}"
done
