#!/bin/sh
# The nasdaq-itch book against an open-source peer on the same Nasdaq
# BinaryFILE day: charles-cooper/itch-order-book (C++, reads a BinaryFILE
# on stdin, aggregate quantity per price level).
#
#   benches/itch_peer.sh PEER_CHECKOUT [WORK_DIR]
#
# Fetches nothing: PEER_CHECKOUT is a checkout of the peer made beforehand
# (outside this repository; none of its code is part of tickgate). Check
# its LICENSE before running it. WORK_DIR (default: a new temporary
# directory) receives the day, the peer's binary and each program's output.
#
# 1. builds tickgate (release) and the peer (g++ -O3 -march=native, as
#    its build.sh does);
# 2. simulates a day: 8,000 symbols, books held around 1,100,000 live
#    orders, MESSAGES (default 12,000,000) messages at 1,000,000 a
#    second, written as a plain BinaryFILE (the peer reads it plain);
# 3. reads the file once so that both runs find it in the page cache;
# 4. runs the peer (`peer < DAY`) and tickgate (`tickgate replay DAY
#    --venue nasdaq-itch --json --timing`, what a user runs to replay a
#    day: MoldUDP64 framing, channel rules, books, quotes, the summary)
#    under /usr/bin/time -v, each RUNS times (default 3);
# 5. prints each program's own report (the peer's stdout, tickgate's
#    `timing`: ns per message inside its replay loop) and, per run, wall
#    time, user + system CPU and peak resident memory.
set -eu
PEER="${1:?usage: benches/itch_peer.sh PEER_CHECKOUT [WORK_DIR]}"
WORK="${2:-$(mktemp -d)}"
MESSAGES="${MESSAGES:-12000000}"
RUNS="${RUNS:-3}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$WORK"

echo "== build" >&2
(cd "$ROOT" && cargo build --release --bin tickgate >&2)
TG="$TARGET/release/tickgate"
(cd "$PEER" && g++ -O3 -march=native -std=c++1y main.cpp bufferedreader.cpp -o "$WORK/peer")

DAY="$WORK/11302026.NASDAQ_ITCH50"
RATE=1000000
DURATION=$(awk "BEGIN { printf \"%.3f\", $MESSAGES / $RATE }")
if [ ! -s "$DAY" ]; then
    echo "== simulate $MESSAGES messages" >&2
    "$TG" simulate --venue nasdaq-itch --lines A --symbols 8000 --orders 1100000 \
        --rate "$RATE" --duration "$DURATION" --batch 8 --channel-heartbeat-ms 0 \
        --seed 1 --out "$DAY" >"$WORK/simulate.txt"
    tail -n 1 "$WORK/simulate.txt"
fi
ls -l "$DAY"
cat "$DAY" >/dev/null

# wall, CPU (user + system) and peak RSS of one /usr/bin/time -v report
summary() {
    awk -F': ' '
        /Elapsed \(wall clock\)/ { n = split($2, t, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + t[i] }
        /User time/ { u = $2 } /System time/ { s = $2 }
        /Maximum resident/ { m = $2 }
        END { printf "wall %.2f s, CPU %.2f s (user %.2f, system %.2f), peak RSS %.1f MiB\n", w, u + s, u, s, m / 1024 }' "$1"
}

i=1
while [ "$i" -le "$RUNS" ]; do
    echo "== run $i: peer"
    /usr/bin/time -v "$WORK/peer" <"$DAY" >"$WORK/peer.out" 2>"$WORK/peer.time"
    echo "   own report: $(tail -n 5 "$WORK/peer.out" | tr '\n' ' ')"
    echo "   $(summary "$WORK/peer.time")"
    echo "== run $i: tickgate replay --venue nasdaq-itch --json --timing"
    /usr/bin/time -v "$TG" replay "$DAY" --venue nasdaq-itch --json --timing \
        >"$WORK/tickgate.json" 2>"$WORK/tickgate.time"
    python3 - "$WORK/tickgate.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
t, f = v["timing"], v["feeds"][0]
print("   own report: %d messages, loop %.2f s wall, %.1f ns/message wall, %.1f ns/message thread CPU; live orders %d, symbols %d"
      % (t["messages"], t["wall_ns"] / 1e9, t["wall_ns_per_message"], t["thread_cpu_ns_per_message"],
         f["live_orders"], len(v["symbols"])))
EOF
    echo "   $(summary "$WORK/tickgate.time")"
    i=$((i + 1))
done
echo "outputs in $WORK"
