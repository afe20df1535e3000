#!/usr/bin/env bash
# Build every cargo-fuzz target in fuzz/ and run each one for N seconds.
#
#   scripts/fuzz-smoke.sh [SECONDS]        # default 20 s per target
#
# Environment:
#   FUZZ_TARGETS    space-separated subset of targets (default: all, from `cargo fuzz list`)
#   FUZZ_TOOLCHAIN  rustup toolchain to use, e.g. "nightly" (default: the active one)
#   CARGO_TARGET_DIR  honoured as usual (default: fuzz/target)
#
# cargo-fuzz needs nightly-only rustc flags (-Zsanitizer=address, ...). On a
# stable toolchain they are unlocked with RUSTC_BOOTSTRAP=1, which this script
# always sets (it is a no-op on nightly).
#
# Exit status: 0 if every target ran clean, 1 if any target crashed or failed
# to run, 2 if cargo-fuzz is missing. Crash inputs land in
# fuzz/artifacts/<target>/; the growing corpus in fuzz/corpus/<target>/.
set -euo pipefail

secs="${1:-20}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [[ "$secs" -eq 0 ]]; then
    echo "usage: $0 [SECONDS]  (a positive integer, default 20)" >&2
    exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
fi

export RUSTC_BOOTSTRAP=1
cargo_cmd=(cargo)
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then
    cargo_cmd=(cargo "+$FUZZ_TOOLCHAIN")
fi

if [[ -n "${FUZZ_TARGETS:-}" ]]; then
    read -r -a targets <<<"$FUZZ_TARGETS"
else
    mapfile -t targets < <("${cargo_cmd[@]}" fuzz list)
fi

echo "== building ${#targets[@]} fuzz targets"
"${cargo_cmd[@]}" fuzz build

logdir="$(mktemp -d)"
trap 'rm -rf "$logdir"' EXIT
failed=()
summary=()
for t in "${targets[@]}"; do
    corpus="corpus/$t"
    artifacts="artifacts/$t/"
    mkdir -p "$corpus" "$artifacts"
    args=(-max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$artifacts")
    if [[ -f "dict/$t.dict" ]]; then
        args+=(-dict="dict/$t.dict")
    fi
    echo "== $t: ${secs}s"
    if "${cargo_cmd[@]}" fuzz run "$t" "$corpus" -- "${args[@]}" >"$logdir/$t.log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed+=("$t")
        tail -n 60 "$logdir/$t.log" >&2
    fi
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$logdir/$t.log" | grep -o '[0-9]*$' || true)"
    summary+=("$(printf '%-14s %-6s %s executions in %ss' "$t" "$status" "${runs:-?}" "$secs")")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
    echo "crashed or failed: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
