#!/bin/bash
# Alternates tickgate's receiver (mcast_rx bench) and sockperf's server at
# each rate, so that both see the same machine load.
# Usage: B=<mcast_rx bench binary> mcast_rx_sockperf.sh SECS RATE...
#   NETBENCH_OPTS: extra mcast_rx options (e.g. "--fifo 10")
#   SP_CHRT: prefix for both sockperf processes (e.g. "chrt -f 10")
SECS=$1; shift
B=${B:?set B to the mcast_rx bench binary}
PORT=47901
$SP_CHRT taskset -c 0 sockperf server -i 239.255.77.201 -p $PORT --mc-rx-if 127.0.0.1 --buffer-size 4194304 > /dev/null 2>&1 &
SP=$!
sleep 1
drops() { $B --sockperf-udp-drops $PORT | sed 's/.*'$PORT': \([0-9]*\);.*/\1/'; }
cpu_ns() { cat /proc/$SP/task/*/schedstat | awk '{s+=$1} END {print s}'; }
echo "| target/s | tickgate achieved/s | tickgate lost (seq) | SO_RXQ_OVFL | RcvbufErrors | tickgate rx ns/datagram | sockperf achieved/s | sockperf lost (socket drops) | sockperf server ns/datagram |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for R in "$@"; do
  T=$($B $NETBENCH_OPTS --rates $R --secs $SECS 2>/dev/null | tail -1)
  d0=$(drops); c0=$(cpu_ns)
  out=$($SP_CHRT taskset -c 1 sockperf tp -i 239.255.77.201 -p $PORT --mc-tx-if 127.0.0.1 --mc-loopback-enable --mc-ttl 1 -m 80 --mps $R -t $SECS 2>&1)
  sleep 0.3
  d1=$(drops); c1=$(cpu_ns)
  sent=$(echo "$out" | grep -o "Total of [0-9]* messages" | grep -o "[0-9]*")
  rate=$(echo "$out" | grep -o "Message Rate is [0-9]*" | grep -o "[0-9]*")
  lost=$((d1-d0))
  spns=$(( (c1-c0) / (sent - lost) ))
  # T: | target | sent | achieved | received | lost | ovfl | rcvbuf | inerr | ns | per batch |
  IFS='|' read -r _ t s a r l o rb ie ns pb _ <<< "$T"
  echo "| $R |$a|$l|$o|$rb|$ns| $rate | $lost | $spns |"
done
kill $SP
