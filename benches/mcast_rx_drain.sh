#!/bin/bash
# Receive capacity by draining a full socket: the receiver is stopped
# (SIGSTOP), N datagrams of 80 bytes are queued into its socket, it is
# continued (SIGCONT) and its CPU time (schedstat) until the queue is empty
# is taken, REPS times. Same procedure for tickgate's receiver (mcast_rx
# --serve: Feed + table publish) and sockperf's server.
# Usage: B=<mcast_rx bench binary> mcast_rx_drain.sh N REPS
#   PRIO: SCHED_FIFO priority of both receivers (default 10)
#   SERVE_OPTS: extra mcast_rx options (--no-feed, --no-kernel-ts)
#   SKIP_SP=1: tickgate only
N=$1; REPS=$2; PRIO=${PRIO:-10}
B=${B:?set B to the mcast_rx bench binary}
rxq() { # rx_queue bytes of the socket bound to port $1
  awk -v p=$(printf ":%04X" $1) 'NR>1 && substr($2,length($2)-4)==p {split($5,q,":"); print strtonum("0x" q[2])}' /proc/net/udp | head -1; }
cpu() { cat /proc/$1/task/*/schedstat | awk '{s+=$1} END {print s}'; }
drain() { # pid port sender-command...
  local pid=$1 port=$2; shift 2
  local total=0 cnt=0
  for r in $(seq $REPS); do
    kill -STOP $pid
    "$@" $r > /dev/null 2>&1
    c0=$(cpu $pid)
    kill -CONT $pid
    for i in $(seq 2000); do [ "$(rxq $port)" = "0" ] && break; sleep 0.001; done
    c1=$(cpu $pid)
    total=$((total + c1 - c0))
  done
  echo $total
}
# tickgate
$B $SERVE_OPTS --serve --port 47910 --rx-cpu 0 --fifo $PRIO > ${TMPDIR:-/tmp}/mcast_rx_serve.out 2>&1 &
TG=$!
for i in $(seq 100); do grep -q ready ${TMPDIR:-/tmp}/mcast_rx_serve.out && break; sleep 0.1; done
next=$(sed -n 's/.*next \([0-9]*\).*/\1/p' ${TMPDIR:-/tmp}/mcast_rx_serve.out)
tg_send() { $B --send $N --first $((next + ($1 - 1) * N)) --rates 200000 --port 47910 --tx-cpu 1; }
tg_ns=$(drain $TG 47910 tg_send)
kill -TERM $TG; wait $TG
cat ${TMPDIR:-/tmp}/mcast_rx_serve.out | tail -2
[ -n "$SKIP_SP" ] && { echo "tickgate: $((REPS*N)) datagrams drained, CPU $tg_ns ns, $((tg_ns / (REPS*N))) ns/datagram"; exit; }
# sockperf
chrt -f $PRIO taskset -c 0 sockperf server -i 239.255.77.201 -p 47911 --mc-rx-if 127.0.0.1 --buffer-size 4194304 > /dev/null 2>&1 &
SP=$!
sleep 1
d0=$($B --sockperf-udp-drops 47911 | sed 's/.*47911: \([0-9]*\);.*/\1/')
sp_send() { taskset -c 1 sockperf tp -i 239.255.77.201 -p 47911 --mc-tx-if 127.0.0.1 --mc-loopback-enable --mc-ttl 1 -m 80 --mps $N -t 1; }
sp_ns=$(drain $SP 47911 sp_send)
d1=$($B --sockperf-udp-drops 47911 | sed 's/.*47911: \([0-9]*\);.*/\1/')
kill $SP
echo "tickgate: $((REPS*N)) datagrams drained, CPU $tg_ns ns, $((tg_ns / (REPS*N))) ns/datagram"
echo "sockperf: ~$((REPS*N)) datagrams (+warm-up) drained, socket drops $((d1-d0)), CPU $sp_ns ns, $((sp_ns / (REPS*N))) ns/datagram"
