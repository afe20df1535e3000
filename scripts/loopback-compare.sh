#!/usr/bin/env bash
# Issue 2's loopback comparison: 2 GiB memory-to-memory and file-to-file
# downloads with -p 1 and -p 4, lightpath (client and server) next to
# globus-url-copy against globus-gridftp-server, rounds interleaved so both
# see the same machine. Prints a CSV of every run and a median table.
# Usage (root, after scripts/install-test-deps.sh and a release build):
#   scripts/loopback-compare.sh [ROUNDS] [SIZE_BYTES]
set -euo pipefail
ROUNDS=${1:-5}
SIZE=${2:-2147483648}
LP=${LP:-$(dirname "$0")/../target/release/lightpath}
W=$(mktemp -d /tmp/lp-compare-XXXX); chmod 755 "$W"
mkdir -p "$W/lp" "$W/g" "$W/out"; chown gftp "$W/g"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
head -c "$SIZE" /dev/urandom > "$W/lp/file"; cp "$W/lp/file" "$W/g/file"; chmod 644 "$W/g/file"
P1=$((20000 + RANDOM % 10000)); P2=$((P1 + 1))
"$LP" serve --listen 127.0.0.1:$P1 --root "$W/lp" --anonymous-write --memory-paths 2>/dev/null &
globus-gridftp-server -aa -anonymous-user gftp -p $P2 -control-interface 127.0.0.1 -home-dir "$W/g" >/dev/null 2>&1 &
sleep 1
run() { # name cmd...
    rm -f "$W/out/f"; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    cat "$W/lp/file" "$W/g/file" > /dev/null   # server side starts from the page cache
    local s e; s=$(date +%s.%N); "${@:2}" >/dev/null 2>&1 || { echo "$1,FAIL"; return; }; e=$(date +%s.%N)
    echo "$1,$(echo "$e - $s" | bc)"
}
echo "config,seconds" > "$W/runs.csv"
for r in $(seq "$ROUNDS"); do
  for p in 1 4; do
    run "mem p$p lightpath" "$LP" cp -q -p $p --len "$SIZE" ftp://127.0.0.1:$P1/dev/zero /dev/null >> "$W/runs.csv"
    run "mem p$p guc" globus-url-copy -p $p -len "$SIZE" ftp://127.0.0.1:$P2/dev/zero file:///dev/null >> "$W/runs.csv"
    run "file p$p lightpath" "$LP" cp -q -p $p ftp://127.0.0.1:$P1/file "$W/out/f" >> "$W/runs.csv"
    run "file p$p guc" globus-url-copy -p $p ftp://127.0.0.1:$P2"$W"/g/file file://"$W"/out/f >> "$W/runs.csv"
  done
done
cat "$W/runs.csv"
echo
echo "| config | median s | min s | max s | median Gbit/s |"
echo "|---|---|---|---|---|"
python3 - "$W/runs.csv" "$SIZE" <<'PY'
import csv, statistics, sys
runs, size = {}, int(sys.argv[2])
for row in csv.DictReader(open(sys.argv[1])):
    runs.setdefault(row["config"], []).append(row["seconds"])
for k in sorted(runs):
    ok = [float(x) for x in runs[k] if x != "FAIL"]
    fails = len(runs[k]) - len(ok)
    if not ok:
        print(f"| {k} | all {fails} runs failed | | | |"); continue
    m = statistics.median(ok)
    note = f" ({fails} failed)" if fails else ""
    print(f"| {k} | {m:.2f}{note} | {min(ok):.2f} | {max(ok):.2f} | {size * 8 / m / 1e9:.1f} |")
PY
