#!/usr/bin/env python3
"""Soak test of the daemon (docs/operations.md, "Soak test"). Not part of CI.

    scripts/soak.py [--minutes 30] [--rate 200000] [--out soak-out] [--bin target/release/tickgate]

Starts `tickgate run` on loopback (one feed on two lines, the gate socket,
metrics, the fills lane on SQLite), `tickgate simulate --live --forever` at
--rate quotes a second on lines A and B, 16 gate clients asking
`CHECK EURUSD` as fast as they can, one client connecting and closing in a
loop (churn), a fills pusher posting batches continuously, and a SIGHUP
every minute. Every 10 s it records the daemon's RSS, open descriptors,
gate latency percentiles (as the clients measured them) and the feed's
lost-message counter to OUT/soak.csv, and at the end plots them to
OUT/soak.png (a PNG written by this script: no plotting library needed).
Memory and descriptors should stay flat, and loss stay 0 (nothing is
injected: `--loss-a/--loss-b` are 0). The CSV also records the lines'
kernel drops (tickgate_line_kernel_drops_total), which tell a receive
thread that fell behind from loss before the socket. By default the feed
thread runs SCHED_FIFO (`fifo_priority = 10`, `--fifo-priority 0` for
none), as on a production host whose cores other work shares.
"""
import argparse, json, os, signal, socket, struct, subprocess, sys, threading, time, urllib.request, zlib

p = argparse.ArgumentParser()
p.add_argument("--minutes", type=float, default=30)
p.add_argument("--rate", type=int, default=200000)
p.add_argument("--out", default="soak-out")
p.add_argument("--bin", default="target/release/tickgate")
p.add_argument("--fifo-priority", type=int, default=10,
               help="the feed's fifo_priority (0: none); the soak runs as root, so SCHED_FIFO is allowed")
p.add_argument("--rcvbuf", type=int, default=8388608, help="each line's rcvbuf")
p.add_argument("--sim-fifo-priority", type=int, default=0,
               help="run the simulators SCHED_FIFO at this priority (chrt; 0: normal), below the feed's: "
                    "they stand for the exchange, which has hosts of its own")
p.add_argument("--sim-nice", type=int, default=0,
               help="the simulators' nice value (they stand for the exchange, which has hosts of its own: "
                    "at nice 0 they get a fair share among the clients' threads)")
p.add_argument("--feed-cpu", type=int, default=-1,
               help="pin the feed thread to this CPU (the feed's `cpu`; -1: not pinned)")
p.add_argument("--sim-cpu", type=int, default=-1,
               help="pin the simulators to this CPU (taskset; -1: not pinned): off the feed thread's core, "
                    "as the exchange's senders are on hosts of their own, so that the realtime feed thread "
                    "does not preempt a sender at every datagram it delivers")
p.add_argument("--sim-burst-us", type=int, default=50,
               help="the simulators' --burst-us: from 200 up they sleep between sendmmsg bursts instead of "
                    "spinning (at 50 us each spins its core between bursts)")
a = p.parse_args()
fifo = f"fifo_priority = {a.fifo_priority}\n" if a.fifo_priority else ""
if a.feed_cpu >= 0:
    fifo += f"cpu = {a.feed_cpu}\n"
os.makedirs(a.out, exist_ok=True)
out = os.path.abspath(a.out)
sock = os.path.join(out, "gate.sock")
cfg = os.path.join(out, "tickgate.toml")
METRICS, FILLS = "127.0.0.1:9599", "127.0.0.1:8599"
open(cfg, "w").write(f"""
[[feed]]
name = "soak"
mode = "full"
max_symbols = 1000
{fifo}[[feed.line]]
name = "A"
group = "239.255.0.1"
port = 30001
interface = "127.0.0.1"
rcvbuf = {a.rcvbuf}
[[feed.line]]
name = "B"
group = "239.255.0.2"
port = 30001
interface = "127.0.0.1"
rcvbuf = {a.rcvbuf}
[gate]
socket = "{sock}"
server_mode = "epoll"
[metrics]
listen = "{METRICS}"
[log]
level = "warn"
[fills]
db = "sqlite:{out}/fills.db"
[fills.http]
listen = "{FILLS}"
rate_per_client = 0
[[fills.http.clients]]
name = "soak"
token = "soak"
accounts = ["*"]
""")
daemon = subprocess.Popen([a.bin, "run", "--config", cfg], stderr=open(os.path.join(out, "daemon.log"), "w"))
for _ in range(300):
    if os.path.exists(sock):
        break
    time.sleep(0.1)
# One simulator per line (same seed: the same stream on both): one sender
# thread did not reach the rate for both lines on 2 cores (119,701
# datagrams a second in all in the first 30-minute run).
def feed_thread_policy():
    """The feed thread's scheduling policy, read from /proc (stat field 41)."""
    for tid in os.listdir(f"/proc/{daemon.pid}/task"):
        if open(f"/proc/{daemon.pid}/task/{tid}/comm").read().strip() == "feed-soak":
            fields = open(f"/proc/{daemon.pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            return {"0": "SCHED_OTHER", "1": "SCHED_FIFO", "2": "SCHED_RR"}.get(fields[38], fields[38])
    return "no feed-soak thread"
print(f"feed thread: {feed_thread_policy()}", flush=True)
# How the simulators are started: pinned, then realtime or reniced.
launch = ["taskset", "-c", str(a.sim_cpu)] if a.sim_cpu >= 0 else []
if a.sim_fifo_priority:
    launch += ["chrt", "-f", str(a.sim_fifo_priority)]
elif a.sim_nice:
    launch += ["nice", "-n", str(a.sim_nice)]
sims = [subprocess.Popen(launch + [a.bin, "simulate", "--live", "--forever", "--rate", str(a.rate), "--symbols", "100",
                          "--lines", line, "--interface", "127.0.0.1",
                          "--burst-us", str(a.sim_burst_us)], stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(out, f"simulate-{line}.log"), "w"))
        for line in ("A", "B")]
stop = threading.Event()
lat_lock, latencies = threading.Lock(), []
errors = {"gate": 0, "fills": 0}

def gate_client():
    s = socket.socket(socket.AF_UNIX); s.connect(sock); f = s.makefile("rb")
    while not stop.is_set():
        t0 = time.perf_counter_ns()
        try:
            s.sendall(b"CHECK EURUSD\n")
            answered = f.readline()
        except OSError:
            answered = b""
        if not answered:
            if not stop.is_set():
                errors["gate"] += 1
            return
        with lat_lock:
            latencies.append(time.perf_counter_ns() - t0)

def churn():
    while not stop.is_set():
        try:
            s = socket.socket(socket.AF_UNIX); s.connect(sock); s.close()
        except OSError:
            errors["gate"] += 1

def pusher():
    n = 0
    while not stop.is_set():
        events = [{"kind": "FILL", "event_id": f"S-{n}-{i}", "deal_id": f"SD-{n}-{i}", "account": "ACC-1",
                   "symbol": "EURUSD", "side": "BUY", "qty": "1000", "price": "1.08500",
                   "exec_time": "2026-11-30T08:00:00Z"} for i in range(100)]
        req = urllib.request.Request(f"http://{FILLS}/v1/fills", data=json.dumps({"events": events}).encode(),
                                     headers={"Authorization": "Bearer soak", "Idempotency-Key": f"soak-{n}",
                                              "Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30).read()
        except Exception:
            errors["fills"] += 1
        n += 1

def metric(text, name):
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name))

threads = [threading.Thread(target=gate_client, daemon=True) for _ in range(16)]
threads += [threading.Thread(target=churn, daemon=True), threading.Thread(target=pusher, daemon=True)]
for t in threads:
    t.start()
rows, start, next_hup = [], time.time(), time.time() + 60
csv = open(os.path.join(out, "soak.csv"), "w")
csv.write("seconds,rss_kib,fds,gate_p50_us,gate_p99_us,gate_p999_us,checks,messages_lost,gate_errors,fills_errors,kernel_drops\n")
while time.time() - start < a.minutes * 60 and daemon.poll() is None:
    time.sleep(10)
    if time.time() >= next_hup:
        daemon.send_signal(signal.SIGHUP); next_hup += 60
    rss = next(int(l.split()[1]) for l in open(f"/proc/{daemon.pid}/status") if l.startswith("VmRSS"))
    fds = len(os.listdir(f"/proc/{daemon.pid}/fd"))
    with lat_lock:
        w = sorted(latencies); latencies.clear()
    pct = lambda q: w[min(len(w) - 1, int(q * len(w)))] / 1000 if w else 0
    text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=10).read().decode()
    lost = metric(text, "tickgate_feed_channel_messages_lost_total")
    # Datagrams the kernel dropped on the lines' sockets (SO_RXQ_OVFL):
    # tells a receive thread that fell behind from loss upstream.
    drops = metric(text, "tickgate_line_kernel_drops_total")
    row = (round(time.time() - start), rss, fds, pct(0.5), pct(0.99), pct(0.999), len(w), lost, errors["gate"],
           errors["fills"], drops)
    rows.append(row)
    csv.write(",".join(str(x) for x in row) + "\n"); csv.flush()
    print(",".join(str(x) for x in row), flush=True)
stop.set()
time.sleep(0.5)
for sim in sims:
    sim.terminate()
daemon.terminate()
for sim in sims:
    sim.wait()
daemon.wait()

def png(path, series, w=900, h=600):
    """One panel per series (0 to its maximum), white background."""
    img = [[255] * (w * 3) for _ in range(h)]
    panel = h // len(series)
    for k, (name, ys, color) in enumerate(series):
        top = k * panel
        for x in range(w):
            img[top + panel - 1][3 * x:3 * x + 3] = [128, 128, 128]
        if len(ys) < 2:
            continue
        # From 0 to the series' maximum: a flat series looks flat, and
        # growth shows in proportion to the whole.
        lo, hi = 0, max(ys)
        span = (hi - lo) or 1
        prev = None
        for i, y in enumerate(ys):
            px = int(i * (w - 1) / (len(ys) - 1))
            py = top + 5 + int((panel - 12) * (1 - (y - lo) / span))
            if prev:
                x0, y0 = prev
                for t in range(max(abs(px - x0), abs(py - y0)) + 1):
                    f = t / max(1, max(abs(px - x0), abs(py - y0)))
                    xx, yy = int(x0 + f * (px - x0)), int(y0 + f * (py - y0))
                    img[yy][3 * xx:3 * xx + 3] = color
            prev = (px, py)
    raw = b"".join(b"\x00" + bytes(r) for r in img)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    open(path, "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))

png(os.path.join(out, "soak.png"), [("rss", [r[1] for r in rows], [200, 0, 0]),
                                    ("fds", [r[2] for r in rows], [0, 0, 200]),
                                    ("p99", [r[4] for r in rows], [0, 150, 0]),
                                    ("lost", [r[7] for r in rows], [150, 0, 150]),
                                    ("drops", [r[10] for r in rows], [200, 120, 0])])
print(f"panels top to bottom: RSS, descriptors, gate p99, messages lost, kernel drops (each from 0 to its own maximum); "
      f"{out}/soak.csv, {out}/soak.png")
sys.exit(1 if errors["gate"] or (rows and rows[-1][7] > 0) else 0)
