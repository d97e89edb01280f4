#!/bin/sh
# The nasdaq-itch replay against an open-source peer on the same Nasdaq
# BinaryFILE day: chronoxor/CppTrader (C++, MIT), whose performance
# programs read a BinaryFILE with its ITCH handler and, in three of them,
# keep per-order books:
#
#   itch_handler              parse only (every message decoded, nothing kept)
#   market_manager_optimized_aggressive
#                             orders in a vector indexed by order reference
#                             (preallocates 300 M orders before its timed
#                             loop), price levels per symbol in sorted
#                             vectors, sells as negative prices: real books
#                             (every order at its own price), the target
#   market_manager_optimized  the same layout with level updates reported
#                             to a handler; as published it never stores an
#                             Add Order's price (below)
#   market_manager_optimized_priced
#                             market_manager_optimized with the Add Order
#                             price kept (below)
#   market_manager            its general matching-engine books
#
# market_manager_optimized as published never stores an Add Order's price
# in its order (`AddOrder` sets the reference, locate, side and shares, not
# `Price`), so every added order joins a level at price 0 of its side; only
# orders made by Replace carry their own price. Its figure is that of a
# book with one level per side for most orders ("Max order book levels"
# 19 on the 12 M day, 37 with the price). This script also builds a copy
# with that one assignment added (`order_ptr->Price = price;`, applied by
# sed to a copy in WORK_DIR: nothing of the peer is part of tickgate) and
# prints the ratio against both. The program the target is set against is
# `market_manager_optimized_aggressive`: its books hold every price level,
# as tickgate's do, and its ratio is printed first.
#
# The books' ends are checked: a copy of each book program (sed again, in
# WORK_DIR, run once after the timed rounds, never timed) prints every
# locate's best bid and offer after its loop, and the script counts the
# symbols whose best bid and offer (price and shares, both sides) equal
# tickgate's quote in its summary (the locates named from the day's Stock
# Directory messages).
#
#   benches/itch_peer.sh PEER_SOURCES [WORK_DIR]
#
# Fetches nothing. PEER_SOURCES is a directory holding checkouts made
# beforehand, outside this repository (none of their code is part of
# tickgate; read each LICENSE before running it):
#
#   git clone https://github.com/chronoxor/CppTrader      PEER_SOURCES/CppTrader
#   git clone https://github.com/chronoxor/CppCommon      PEER_SOURCES/CppCommon
#   git clone https://github.com/chronoxor/CppBenchmark   PEER_SOURCES/CppBenchmark
#   git clone https://github.com/weisslj/cpp-optparse     PEER_SOURCES/cpp-optparse
#   git clone https://github.com/fmtlib/fmt               PEER_SOURCES/fmt
#   git clone https://github.com/HdrHistogram/HdrHistogram_c PEER_SOURCES/HdrHistogram
#
# (CppTrader's own build fetches the same modules through its .gitlinks
# and builds with CMake; the programs are built here with g++ directly.
# fmt is built from its src/format.cc and src/os.cc, as fmt 10 and later
# lay it out; the figures in BENCHMARKS.md used fmt 60ccad5.)
# WORK_DIR (default: a new temporary directory) receives the peer's
# objects and programs, the day and each program's output; a WORK_DIR
# given again reuses them.
#
# 1. builds tickgate (release) and the peer (g++ -O3 -march=native
#    -std=c++20 -DNDEBUG: every source of its libraries into one archive,
#    then the programs);
# 2. simulates a day: 8,000 symbols, books held around 1,100,000 live
#    orders, MESSAGES (default 12,000,000) messages at 1,000,000 a
#    second, written as a plain BinaryFILE;
# 3. reads the file once so that every run finds it in the page cache;
# 4. RUNS times (default 5), alternating: itch_handler,
#    market_manager_optimized_aggressive, market_manager_optimized,
#    market_manager_optimized_priced, market_manager (unless
#    MARKET_MANAGER=0),
#    `tickgate replay DAY --venue nasdaq-itch --json --timing` (what a
#    user runs to replay a day: channel rules, books with every order,
#    quotes, the summary), each under /usr/bin/time -v, with the load
#    average before each;
# 5. prints each run: the program's own figure (the peer's "Processing
#    time" over its message count; tickgate's `timing`, its replay loop),
#    wall, user + system CPU and peak RSS of the whole process; then the
#    medians, and tickgate's per-message figure over the aggressive
#    program's (first), the priced copy's and the published program's
#    (the ratios), and tickgate's peak RSS over the aggressive program's;
# 6. runs each book program's check copy once and prints how many
#    symbols' final best bid and offer equal tickgate's quotes.
set -eu
PEER="${1:?usage: benches/itch_peer.sh PEER_SOURCES [WORK_DIR]}"
PEER="$(cd "$PEER" && pwd)"
WORK="${2:-$(mktemp -d)}"
MESSAGES="${MESSAGES:-12000000}"
RUNS="${RUNS:-5}"
MARKET_MANAGER="${MARKET_MANAGER:-1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"

echo "== build" >&2
(cd "$ROOT" && cargo build --release --bin tickgate >&2)
TG="${TICKGATE:-$TARGET/release/tickgate}"

PROGRAMS="itch_handler market_manager_optimized_aggressive market_manager_optimized market_manager_optimized_priced"
[ "$MARKET_MANAGER" = 1 ] && PROGRAMS="$PROGRAMS market_manager"
CXXFLAGS="-O3 -march=native -DNDEBUG -std=c++20 -w"
INC="-I$PEER/CppTrader/include -I$PEER/CppCommon/include -I$PEER/CppCommon/plugins -I$PEER/CppBenchmark/include -I$PEER/fmt/include -I$PEER/cpp-optparse -I$PEER/HdrHistogram/include"
mkdir -p "$WORK/peer/obj"
if [ ! -s "$WORK/peer/libpeer.a" ]; then
    echo "== build the peer's libraries (g++ $CXXFLAGS)" >&2
    {
        find "$PEER/CppCommon/source" "$PEER/CppBenchmark/source" "$PEER/CppTrader/source" -name '*.cpp'
        echo "$PEER/cpp-optparse/OptionParser.cpp"
        echo "$PEER/fmt/src/format.cc"
        echo "$PEER/fmt/src/os.cc"
    } | while read -r src; do
        obj="$WORK/peer/obj/$(echo "${src#"$PEER"/}" | tr / _).o"
        echo "$src $obj"
    done | xargs -P "$(nproc)" -n 2 sh -c "g++ $CXXFLAGS $INC -c \"\$0\" -o \"\$1\""
    for src in "$PEER"/HdrHistogram/src/*.c; do
        gcc -O3 -march=native -DNDEBUG -w -I"$PEER/HdrHistogram/include" \
            -c "$src" -o "$WORK/peer/obj/HdrHistogram_$(basename "$src").o"
    done
    ar rcs "$WORK/peer/libpeer.a" "$WORK"/peer/obj/*.o
fi
# The priced copy: the published program with one line added after the
# side is stored in AddOrder; the build stops if the line is not there.
PRICED="$WORK/peer/market_manager_optimized_priced.cpp"
sed '/^        order_ptr->Side = side;$/{n;/^        order_ptr->Quantity = quantity;$/i\
        order_ptr->Price = price;
}' "$PEER/CppTrader/performance/market_manager_optimized.cpp" >"$PRICED"
if [ "$(grep -c 'order_ptr->Price = price;' "$PRICED")" != 1 ]; then
    echo "market_manager_optimized.cpp: AddOrder is not as expected; no priced copy" >&2
    exit 1
fi
# The check copies of the book programs: each prints, after its loop, the
# best bid and offer of every locate whose book is not empty (the
# aggressive program keeps sells as negative prices: their magnitude).
BOOKS="market_manager_optimized_aggressive market_manager_optimized market_manager_optimized_priced"
cat >"$WORK/peer/bbo_snippet.cpp" <<'EOF'
    for (uint32_t id = 0; id < 10000; ++id)
    {
        const auto* book = market.GetOrderBook((uint16_t)id);
        const auto* bid = book->best_bid();
        const auto* ask = book->best_ask();
        if (bid || ask)
            std::cout << "BBO " << id
                      << " " << (bid ? std::llabs((long long)bid->Price) : 0LL)
                      << " " << (bid ? (unsigned long long)bid->Volume : 0ULL)
                      << " " << (ask ? std::llabs((long long)ask->Price) : 0LL)
                      << " " << (ask ? (unsigned long long)ask->Volume : 0ULL) << std::endl;
    }
EOF
src_of() {
    if [ "$1" = market_manager_optimized_priced ]; then
        echo "$PRICED"
    else
        echo "$PEER/CppTrader/performance/$1.cpp"
    fi
}
for p in $PROGRAMS; do
    if [ ! -x "$WORK/peer/$p" ]; then
        echo "== build the peer's $p" >&2
        g++ $CXXFLAGS $INC "$(src_of "$p")" "$WORK/peer/libpeer.a" \
            -lpthread -ldl -luuid -o "$WORK/peer/$p"
    fi
done
for p in $BOOKS; do
    if [ ! -x "$WORK/peer/${p}_bbo" ]; then
        echo "== build the check copy of the peer's $p" >&2
        awk -v f="$WORK/peer/bbo_snippet.cpp" '
            /^    return 0;$/ { while ((getline l < f) > 0) print l; close(f) }
            { print }' "$(src_of "$p")" >"$WORK/peer/${p}_bbo.cpp"
        if [ "$(grep -c '"BBO "' "$WORK/peer/${p}_bbo.cpp")" != 1 ]; then
            echo "$p.cpp: main does not end as expected; no check copy" >&2
            exit 1
        fi
        g++ $CXXFLAGS $INC "$WORK/peer/${p}_bbo.cpp" "$WORK/peer/libpeer.a" \
            -lpthread -ldl -luuid -o "$WORK/peer/${p}_bbo"
    fi
done

DAY="$WORK/11302026.NASDAQ_ITCH50"
RATE=1000000
DURATION=$(awk "BEGIN { printf \"%.3f\", $MESSAGES / $RATE }")
if [ ! -s "$DAY" ] || [ "$(cat "$WORK/day.messages" 2>/dev/null)" != "$MESSAGES" ]; then
    echo "== simulate $MESSAGES messages" >&2
    "$TG" simulate --venue nasdaq-itch --lines A --symbols 8000 --orders 1100000 \
        --rate "$RATE" --duration "$DURATION" --batch 8 --channel-heartbeat-ms 0 \
        --seed 1 --out "$DAY" >"$WORK/simulate.txt"
    echo "$MESSAGES" >"$WORK/day.messages"
    tail -n 1 "$WORK/simulate.txt"
fi
ls -l "$DAY"
cat "$DAY" >/dev/null

# one line per run: program, ns a message (own figure), wall s, CPU s,
# user s, system s, peak RSS MiB, messages, load average, thread CPU ns a
# message (tickgate)
RESULTS="$WORK/results.tsv"
: >"$RESULTS"

# wall, user, system and peak RSS (KiB) of one /usr/bin/time -v report
times_of() {
    awk -F': ' '
        /Elapsed \(wall clock\)/ { n = split($2, t, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + t[i] }
        /User time/ { u = $2 } /System time/ { s = $2 }
        /Maximum resident/ { m = $2 }
        END { printf "%.2f %.2f %.2f %d", w, u, s, m }' "$1"
}

# The peer's "Processing time: 1.234 s" (or ms, mcs, ns; minutes as
# m:ss.mmm m) in ns.
peer_ns() {
    awk -F': ' '
        /^Processing time/ {
            split($2, a, " "); v = a[1]; u = a[2]
            if (u == "m") { split(v, ms, ":"); t = (ms[1] * 60 + ms[2]) * 1e9 }
            else if (u == "s") t = v * 1e9
            else if (u == "ms") t = v * 1e6
            else if (u == "mcs") t = v * 1e3
            else t = v
        }
        /^Total ITCH messages/ { n = $2 }
        END { if (n > 0) printf "%.1f %d", t / n, n; else print "nan 0" }' "$1"
}

# program, ns a message, messages, /usr/bin/time report, load average,
# thread CPU ns a message (tickgate's loop; "-" for the peer)
record() {
    prog=$1 ns=$2 msgs=$3 l=$5 tcpu=${6:--}
    # shellcheck disable=SC2046
    set -- $(times_of "$4")
    cpu=$(awk "BEGIN { printf \"%.2f\", $2 + $3 }")
    rss=$(awk "BEGIN { printf \"%.1f\", $4 / 1024 }")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$prog" "$ns" "$1" "$cpu" "$2" "$3" "$rss" "$msgs" "$l" "$tcpu" >>"$RESULTS"
    echo "   $ns ns a message ($msgs messages); whole process: wall $1 s, CPU $cpu s (user $2, system $3), peak RSS $rss MiB"
}

load() { cut -d' ' -f1 /proc/loadavg; }

i=1
while [ "$i" -le "$RUNS" ]; do
    for p in $PROGRAMS; do
        l=$(load)
        echo "== run $i: $p (load $l)"
        /usr/bin/time -v "$WORK/peer/$p" -i "$DAY" >"$WORK/$p.out" 2>"$WORK/$p.time"
        echo "   own report: $(grep -E '^(Errors|Processing time|Total ITCH messages|ITCH message latency|Max order book levels|Max orders)' "$WORK/$p.out" | tr '\n' ';')"
        set -- $(peer_ns "$WORK/$p.out")
        record "$p" "$1" "$2" "$WORK/$p.time" "$l"
    done
    l=$(load)
    echo "== run $i: tickgate replay --venue nasdaq-itch --json --timing (load $l)"
    /usr/bin/time -v "$TG" replay "$DAY" --venue nasdaq-itch --json --timing \
        >"$WORK/tickgate.json" 2>"$WORK/tickgate.time"
    set -- $(python3 - "$WORK/tickgate.json" <<'EOF'
import json, sys
v = json.load(open(sys.argv[1]))
t, f = v["timing"], v["feeds"][0]
print("%.1f %d %.1f %d %d" % (t["wall_ns_per_message"], t["messages"], t["thread_cpu_ns_per_message"],
      f["live_orders"], len(v["symbols"])))
EOF
    )
    echo "   own report: loop $1 ns a message wall, $3 ns thread CPU; live orders $4, symbols $5"
    record tickgate "$1" "$2" "$WORK/tickgate.time" "$l" "$3"
    i=$((i + 1))
done

echo "== medians of $RUNS runs ($MESSAGES messages)"
python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
progs = []
for r in rows:
    if r[0] not in progs:
        progs.append(r[0])
med = {}
print("| program | ns a message, own figure (wall; range) | wall | CPU | peak RSS | load |")
print("|---|---|---|---|---|---|")
for p in progs:
    rs = [r for r in rows if r[0] == p]
    col = lambda i: statistics.median(float(r[i]) for r in rs)
    med[p] = col(1)
    lo, hi = min(float(r[1]) for r in rs), max(float(r[1]) for r in rs)
    loads = [float(r[8]) for r in rs]
    tcpu = [float(r[9]) for r in rs if r[9] != "-"]
    own = "%.1f (%.1f-%.1f)" % (med[p], lo, hi)
    if tcpu:
        own += "; thread CPU %.1f (%.1f-%.1f)" % (statistics.median(tcpu), min(tcpu), max(tcpu))
    print("| %s | %s | %.2f s | %.2f s | %.1f MiB | %.1f-%.1f |"
          % (p, own, col(2), col(3), col(6), min(loads), max(loads)))
names = {
    "market_manager_optimized_aggressive": "the aggressive program (every price level kept; the target)",
    "market_manager_optimized_priced": "the priced copy (published program, Add Order price kept)",
    "market_manager_optimized": "the published program (Add Order price dropped)",
}
for peer in ("market_manager_optimized_aggressive", "market_manager_optimized_priced",
             "market_manager_optimized"):
    if "tickgate" in med and peer in med:
        print("tickgate / %s, per message (wall, medians): %.2fx"
              % (names[peer], med["tickgate"] / med[peer]))
        theirs = [float(r[1]) for r in rows if r[0] == peer]
        tg = [float(r[1]) for r in rows if r[0] == "tickgate"]
        print("   per run: " + ", ".join("%.2fx" % (t / m) for t, m in zip(tg, theirs)))
peer = "market_manager_optimized_aggressive"
if "tickgate" in med and peer in med:
    rss = lambda p: statistics.median(float(r[6]) for r in rows if r[0] == p)
    print("tickgate / the aggressive program, peak RSS (medians): %.1f / %.1f MiB = 1/%.1f"
          % (rss("tickgate"), rss(peer), rss(peer) / rss("tickgate")))
EOF
echo "== final best bid and offer of each book program against tickgate's quotes"
for p in $BOOKS; do
    "$WORK/peer/${p}_bbo" -i "$DAY" >"$WORK/${p}_bbo.out"
done
python3 - "$DAY" "$WORK/tickgate.json" $(for p in $BOOKS; do echo "$WORK/${p}_bbo.out"; done) <<'EOF'
import json, sys
from decimal import Decimal
day, tg, outs = sys.argv[1], sys.argv[2], sys.argv[3:]
# locate -> stock from the day's Stock Directory messages (BinaryFILE: a
# 2-byte length before each message; R: locate at 1, stock at 11..19)
names = {}
data = open(day, "rb").read()
at, n = 0, len(data)
while at + 2 < n:
    ln = int.from_bytes(data[at:at + 2], "big")
    if data[at + 2] == 0x52 and ln >= 19:
        m = data[at + 2:at + 2 + ln]
        names[int.from_bytes(m[1:3], "big")] = m[11:19].decode("ascii").rstrip()
    at += 2 + ln
symbols = json.load(open(tg))["symbols"]
def theirs(price, qty):
    return None if qty == 0 else (Decimal(price) / 10000, qty)
def ours(s):
    if s is None:
        return None
    px, qty = s.split("@")
    return (Decimal(px), int(qty))
for out in outs:
    books = {}
    for line in open(out):
        f = line.split()
        if f and f[0] == "BBO":
            books[int(f[1])] = (theirs(int(f[2]), int(f[3])), theirs(int(f[4]), int(f[5])))
    same = 0
    for locate, stock in names.items():
        q = symbols.get(stock)
        if q is not None and books.get(locate, (None, None)) == (ours(q["bid"]), ours(q["ask"])):
            same += 1
    prog = out.rsplit("/", 1)[1][:-len("_bbo.out")]
    print("%s: final best bid and offer equal to tickgate's quote on %d of %d symbols"
          % (prog, same, len(symbols)))
EOF
echo "outputs in $WORK"
