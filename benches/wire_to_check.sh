#!/bin/bash
# Wire-to-check latency: a datagram's send time to its quote being visible
# to a reader in another process spinning on the shared state file, for the
# daemon as users run it (`tickgate run --config`, release) and for the
# floor (benches/wire_to_check.rs `floor`: recvmmsg, then sequence and
# price into a shared slot under a seqlock, nothing else). The same sender
# and the same reader serve both; within each round every variant runs in
# turn (daemon, floor, daemon busy-poll, floor busy-poll), so all see the
# same machine load. BENCHMARKS.md "Wire to check" has the figures.
#
# Usage: benches/wire_to_check.sh
#   B=<wire_to_check bench binary>  (default: built with cargo bench --no-run)
#   T=<tickgate release binary>     (default: target/release/tickgate, built)
#   ROUNDS=3 SECS=3 RATES="100000 1000000" PROTOS="tickgate itch"
#   VARIANTS="daemon floor daemon-busy floor-busy"
#   SENDER_CPU=0 READER_CPU=1 FEED_CPU=0   (the CPU layout, below)
#   PORT=47971                             (the group is 239.255.91.1:PORT)
#   LOG=<file for every measurement>       (default: in the work directory)
#
# CPU layout (a 2-vCPU machine cannot host three busy threads): the reader
# spins alone on READER_CPU; the sender, paced by sleeps (timer slack 1 ns),
# is pinned to SENDER_CPU; the daemon's feed thread (and the floor) is
# unpinned without busy-poll, and pinned to FEED_CPU, beside the sender,
# with busy-poll (`busy_poll = true`, `cpu = FEED_CPU`).
#
# Each line of the table: medians over the rounds of each round's p50, p99
# and p99.9 (ns, CLOCK_MONOTONIC, the first WARMUP seconds of each run left
# out), and the daemon's ratio to the floor of the same mode.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-3}
WARMUP=${WARMUP:-0.5}
RATES=${RATES:-"100000 1000000"}
PROTOS=${PROTOS:-"tickgate itch"}
VARIANTS=${VARIANTS:-"daemon floor daemon-busy floor-busy"}
SENDER_CPU=${SENDER_CPU:-0}
READER_CPU=${READER_CPU:-1}
FEED_CPU=${FEED_CPU:-0}
PORT=${PORT:-47971}
GROUP_IP=239.255.91.1
GROUP=$GROUP_IP:$PORT
if [ -z "${B:-}" ]; then
  B=$(cargo bench --bench wire_to_check --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*wire_to_check[^"]*"' | tail -1 | cut -d'"' -f4)
fi
if [ -z "${T:-}" ]; then
  cargo build --release --bin tickgate >&2
  T=target/release/tickgate
fi
DIR=$(mktemp -d /tmp/wire_to_check.XXXXXX)
LOG=${LOG:-$DIR/runs.log}
RX=
cleanup() { [ -n "$RX" ] && kill "$RX" 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT

config() { # proto busy
  local proto=$1 busy=$2
  {
    echo '[[feed]]'
    echo 'name = "wtc"'
    if [ "$proto" = itch ]; then echo 'venue = "nasdaq-itch"'; else echo 'mode = "full"'; fi
    if [ "$busy" = 1 ]; then echo 'busy_poll = true'; echo "cpu = $FEED_CPU"; fi
    echo '[[feed.line]]'
    echo 'name = "A"'
    echo "group = \"$GROUP_IP\""
    echo "port = $PORT"
    echo 'interface = "127.0.0.1"'
    echo '[feed.symbols.WTC]'
    echo 'stale_ms = 500'
    echo '[gate]'
    echo "socket = \"$DIR/gate.sock\""
    echo "shm = \"$DIR/state.shm\""
    echo '[metrics]'
    echo 'enabled = false'
    echo '[log]'
    echo 'level = "warn"'
  } > "$DIR/$proto-$busy.toml"
}
for p in $PROTOS; do config "$p" 0; config "$p" 1; done

measure() { # proto rate variant round
  local proto=$1 rate=$2 variant=$3 round=$4 shm mode n
  rm -f "$DIR/state.shm" "$DIR/floor.shm" "$DIR/gate.sock"
  case $variant in
    daemon) "$T" run --config "$DIR/$proto-0.toml" 2>>"$DIR/daemon.log" & RX=$!; shm=$DIR/state.shm; mode=daemon ;;
    daemon-busy) "$T" run --config "$DIR/$proto-1.toml" 2>>"$DIR/daemon.log" & RX=$!; shm=$DIR/state.shm; mode=daemon ;;
    floor) "$B" floor --proto "$proto" --group "$GROUP" --shm "$DIR/floor.shm" >/dev/null & RX=$!; shm=$DIR/floor.shm; mode=floor ;;
    floor-busy) "$B" floor --proto "$proto" --group "$GROUP" --shm "$DIR/floor.shm" --busy --cpu "$FEED_CPU" >/dev/null & RX=$!; shm=$DIR/floor.shm; mode=floor ;;
    *) echo "unknown variant $variant" >&2; exit 2 ;;
  esac
  for _ in $(seq 400); do [ -e "$shm" ] && break; sleep 0.05; done
  n=$(awk "BEGIN {printf \"%d\", $rate * $SECS}")
  taskset -c "$READER_CPU" "$B" read --mode "$mode" --shm "$shm" --n "$n" --timeout $((SECS + 5)) --out "$DIR/seen" >"$DIR/read.out" &
  local rd=$!
  sleep 0.3
  taskset -c "$SENDER_CPU" "$B" send --proto "$proto" --rate "$rate" --secs "$SECS" --group "$GROUP" --out "$DIR/stamps" >"$DIR/send.out"
  wait $rd
  kill "$RX"; wait "$RX" || true; RX=
  local res warm
  warm=$(awk "BEGIN {printf \"%d\", $rate * $WARMUP}")
  res=$("$B" analyze --stamps "$DIR/stamps" --seen "$DIR/seen" --warmup "$warm")
  # proto rate variant round p50 p99 p99.9 max seen measured achieved/s
  echo "$proto $rate $variant $round $res $(grep -o '[0-9]*/s (target' "$DIR/send.out" | cut -d/ -f1)" | tee -a "$LOG" "$DIR/this.log" >&2
}

echo "# $(date -u +%FT%TZ) $(uptime)" | tee -a "$LOG" >&2
for round in $(seq "$ROUNDS"); do
  for proto in $PROTOS; do
    for rate in $RATES; do
      for v in $VARIANTS; do measure "$proto" "$rate" "$v" "$round"; done
    done
  done
done
echo "# $(date -u +%FT%TZ) $(uptime)" | tee -a "$LOG" >&2

# The table: medians over the rounds; ratios daemon / floor of the same mode.
awk '
  function median(list,   a, k, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  /^#/ { next }
  { k = $1 " " $2 " " $3; p50[k] = p50[k] " " $5; p99[k] = p99[k] " " $6; p999[k] = p999[k] " " $7
    seen[k] = seen[k] " " ($9 / $10); ach[k] = ach[k] " " $11; if (!(k in order)) { order[k] = ++nk; keys[nk] = k } }
  END {
    print "| protocol | rate/s (achieved) | receiver | p50 us | p99 us | p99.9 us | seen | p50 / floor | p99 / floor | p99.9 / floor |"
    print "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    for (i = 1; i <= nk; i++) {
      k = keys[i]; split(k, f, " ")
      fl = f[1] " " f[2] " " (f[3] ~ /busy/ ? "floor-busy" : "floor")
      r50 = r99 = r999 = "-"
      if (f[3] ~ /daemon/ && (fl in order)) {
        r50 = sprintf("%.2fx", median(p50[k]) / median(p50[fl]))
        r99 = sprintf("%.2fx", median(p99[k]) / median(p99[fl]))
        r999 = sprintf("%.2fx", median(p999[k]) / median(p999[fl]))
      }
      printf "| %s | %s (%d) | %s | %.1f | %.1f | %.1f | %.3f | %s | %s | %s |\n", f[1], f[2], median(ach[k]), f[3],
        median(p50[k]) / 1000, median(p99[k]) / 1000, median(p999[k]) / 1000, median(seen[k]), r50, r99, r999
    }
  }' "$DIR/this.log"
