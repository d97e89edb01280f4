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
#   VARIANTS="daemon floor daemon-pinned floor-pinned daemon-busy floor-busy"
#   SENDER_CPU=0 READER_CPU=1 FEED_CPU=0   (the CPU layout, below)
#   RT=1                                   (SCHED_FIFO, below; RT=0: none)
#   TICK_US=50                             (the sender wakes at most this often)
#   PORT=47971                             (the group is 239.255.91.1:PORT)
#   FLOOR_ARGS=                            (more floor options: --work-ns N, --timestamps)
#   LOG=<file for every measurement>       (default: in the work directory)
#   TABLE=<a LOG of one run>                (only print that run's table)
#
# CPU layout (a 2-vCPU machine cannot host three busy threads): the reader
# spins alone on READER_CPU; the sender, paced by sleeps (timer slack 1 ns;
# it wakes at most every TICK_US and sends what is due, each datagram
# stamped on its own), is pinned to SENDER_CPU. The receiver, the daemon's feed thread or the
# floor: "daemon"/"floor" as configured by default (sleeping in epoll, or
# blocking in recvmmsg, on no particular CPU; the kernel may then wake it on
# the reader's CPU), "-pinned" the same pinned to FEED_CPU beside the
# sender (`cpu = FEED_CPU`), "-busy" spinning there (`busy_poll = true`).
# "floor-epoll" (not in the default VARIANTS) is the floor woken as the
# daemon's feed thread is, by `epoll_wait` and then non-blocking
# `recvmmsg`: the part of the daemon's figure that is the wake alone.
#
# With RT=1 (the default) every thread on the path runs SCHED_FIFO, the
# sender above the receiver above the reader (30, 20, 10): the daemon's
# feed thread through its own setting (`fifo_priority = 20`), the floor
# and the bench's processes under chrt. On a machine whose cores other
# work keeps busy (a shared one), ordinary priorities measure the other
# work: cgroups share the CPUs between users whatever the nice value. The
# kernel still takes 5% of each CPU back for ordinary tasks (RT
# throttling), so the spinning reader is sometimes away: the table's
# "reader on CPU" columns leave those updates out.
#
# Each line of the table: medians over the rounds of each round's p50, p99
# and p99.9 (CLOCK_MONOTONIC, the first WARMUP seconds of each run left
# out) of every update the reader saw, and of those it saw without having
# been off its CPU since the send (a preempted reader sees late what the
# receiver published on time); the daemon's ratios to the floor of the
# same mode.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-3}
WARMUP=${WARMUP:-0.5}
RATES=${RATES:-"100000 1000000"}
PROTOS=${PROTOS:-"tickgate itch"}
VARIANTS=${VARIANTS:-"daemon floor daemon-pinned floor-pinned daemon-busy floor-busy"}
SENDER_CPU=${SENDER_CPU:-0}
TICK_US=${TICK_US:-50}
READER_CPU=${READER_CPU:-1}
FEED_CPU=${FEED_CPU:-0}
PORT=${PORT:-47971}
GROUP_IP=239.255.91.1
GROUP=$GROUP_IP:$PORT
if [ -z "${B:-}" ] && [ -z "${TABLE:-}" ]; then
  B=$(cargo bench --bench wire_to_check --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*wire_to_check[^"]*"' | tail -1 | cut -d'"' -f4)
fi
if [ -z "${T:-}" ] && [ -z "${TABLE:-}" ]; then
  cargo build --release --bin tickgate >&2
  T=target/release/tickgate
fi
RT=${RT:-1}
FLOOR_ARGS=${FLOOR_ARGS:-}
if [ "$RT" = 1 ]; then
  TX_RT="chrt -f 30"; RX_RT="chrt -f 20"; RD_RT="chrt -f 10"; FEED_FIFO=20
else
  TX_RT=; RX_RT=; RD_RT=; FEED_FIFO=
fi
DIR=$(mktemp -d /tmp/wire_to_check.XXXXXX)
LOG=${LOG:-$DIR/runs.log}
RX=
cleanup() { [ -n "$RX" ] && kill "$RX" 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT

config() { # proto variant
  local proto=$1 variant=$2
  {
    echo '[[feed]]'
    echo 'name = "wtc"'
    if [ "$proto" = itch ]; then echo 'venue = "nasdaq-itch"'; else echo 'mode = "full"'; fi
    case $variant in
      daemon-pinned) echo "cpu = $FEED_CPU" ;;
      daemon-busy) echo 'busy_poll = true'; echo "cpu = $FEED_CPU" ;;
    esac
    if [ -n "$FEED_FIFO" ]; then echo "fifo_priority = $FEED_FIFO"; fi
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
  } > "$DIR/$proto-$variant.toml"
}
for p in $PROTOS; do for v in daemon daemon-pinned daemon-busy; do config "$p" "$v"; done; done

measure() { # proto rate variant round
  local proto=$1 rate=$2 variant=$3 round=$4 shm mode n
  rm -f "$DIR/state.shm" "$DIR/floor.shm" "$DIR/gate.sock"
  case $variant in
    daemon*) "$T" run --config "$DIR/$proto-$variant.toml" 2>>"$DIR/daemon.log" & RX=$!; shm=$DIR/state.shm; mode=daemon ;;
    floor-epoll) $RX_RT "$B" floor $FLOOR_ARGS --epoll --proto "$proto" --group "$GROUP" --shm "$DIR/floor.shm" >/dev/null & RX=$!; shm=$DIR/floor.shm; mode=floor ;;
    floor) $RX_RT "$B" floor $FLOOR_ARGS --proto "$proto" --group "$GROUP" --shm "$DIR/floor.shm" >/dev/null & RX=$!; shm=$DIR/floor.shm; mode=floor ;;
    floor-pinned) $RX_RT "$B" floor $FLOOR_ARGS --proto "$proto" --group "$GROUP" --shm "$DIR/floor.shm" --cpu "$FEED_CPU" >/dev/null & RX=$!; shm=$DIR/floor.shm; mode=floor ;;
    floor-busy) $RX_RT "$B" floor $FLOOR_ARGS --proto "$proto" --group "$GROUP" --shm "$DIR/floor.shm" --busy --cpu "$FEED_CPU" >/dev/null & RX=$!; shm=$DIR/floor.shm; mode=floor ;;
    *) echo "unknown variant $variant" >&2; exit 2 ;;
  esac
  for _ in $(seq 400); do [ -e "$shm" ] && break; sleep 0.05; done
  n=$(awk "BEGIN {printf \"%d\", $rate * $SECS}")
  $RD_RT taskset -c "$READER_CPU" "$B" read --mode "$mode" --shm "$shm" --n "$n" --timeout $((SECS + 5)) --out "$DIR/seen" >"$DIR/read.out" &
  local rd=$!
  sleep 0.3
  $TX_RT taskset -c "$SENDER_CPU" "$B" send --proto "$proto" --rate "$rate" --secs "$SECS" --tick-us "$TICK_US" --group "$GROUP" --out "$DIR/stamps" >"$DIR/send.out"
  wait $rd
  kill "$RX"; wait "$RX" || true; RX=
  local res warm
  warm=$(awk "BEGIN {printf \"%d\", $rate * $WARMUP}")
  res=$("$B" analyze --stamps "$DIR/stamps" --seen "$DIR/seen" --warmup "$warm")
  # proto rate variant round, p50 p99 p99.9 max visible sent, the same
  # five for the datagrams the reader was on its CPU for, states the
  # reader saw, achieved/s
  echo "$proto $rate $variant $round $res $(grep -o '[0-9]*/s (target' "$DIR/send.out" | cut -d/ -f1)" | tee -a "$LOG" "$DIR/this.log" >&2
}

if [ -n "${TABLE:-}" ]; then
  grep -v '^#' "$TABLE" > "$DIR/this.log"
  ROUNDS=0
fi
[ "$ROUNDS" = 0 ] || echo "# $(date -u +%FT%TZ) $(uptime)" | tee -a "$LOG" >&2
for round in $(seq "$ROUNDS"); do
  for proto in $PROTOS; do
    for rate in $RATES; do
      for v in $VARIANTS; do measure "$proto" "$rate" "$v" "$round"; done
    done
  done
done
[ "$ROUNDS" = 0 ] || echo "# $(date -u +%FT%TZ) $(uptime)" | tee -a "$LOG" >&2

# The table: medians over the rounds; ratios daemon / floor of the same mode.
awk '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function us3(k, c) { return median(v[k, c]) < 0 ? "none" : sprintf("%.1f / %.1f / %.1f", median(v[k, c]) / 1000, median(v[k, c + 1]) / 1000, median(v[k, c + 2]) / 1000) }
  function r1(a, b) { return (a > 0 && b > 0) ? sprintf("%.2f", a / b) : "-" }
  function ratio3(k, f, c) { return r1(median(v[k, c]), median(v[f, c])) " / " r1(median(v[k, c + 1]), median(v[f, c + 1])) " / " r1(median(v[k, c + 2]), median(v[f, c + 2])) }
  /^#/ { next }
  { k = $1 " " $2 " " $3
    for (c = 5; c <= 17; c++) v[k, c] = v[k, c] " " $c
    v[k, "vis"] = v[k, "vis"] " " ($9 / $10); v[k, "seen"] = v[k, "seen"] " " ($16 / $10)
    v[k, "present"] = v[k, "present"] " " ($9 ? $15 / $9 : 0)
    if (!(k in order)) { order[k] = ++nk; keys[nk] = k } }
  END {
    print "| protocol | rate/s (achieved) | receiver | p50 / p99 / p99.9 us | visible, seen alone | reader on CPU: p50 / p99 / p99.9 us (share) | ratio to floor | ratio to floor, reader on CPU |"
    print "|---|---:|---|---:|---:|---:|---:|---:|"
    for (i = 1; i <= nk; i++) {
      k = keys[i]; split(k, f, " ")
      fl = f[1] " " f[2] " " f[3]; sub(/daemon/, "floor", fl)
      r = rp = "-"
      if (f[3] ~ /daemon/ && (fl in order)) { r = ratio3(k, fl, 5); rp = ratio3(k, fl, 11) }
      printf "| %s | %s (%d) | %s | %s | %.3f, %.3f | %s (%.2f) | %s | %s |\n", f[1], f[2], median(v[k, 17]), f[3],
        us3(k, 5), median(v[k, "vis"]), median(v[k, "seen"]), us3(k, 11), median(v[k, "present"]), r, rp
    }
  }' "$DIR/this.log"
