"""tickgate's pre-trade check from the shared state file, through
libtickgate (ctypes; no compiled extension). The verdict and the answer
line are exactly the gate socket's (gate.md).

    from tickgate import Client
    with Client() as gate:               # $TICKGATE_SHM or /run/tickgate/state.shm
        a = gate.check("EURUSD")
        if a.ok: ...
        print(a.line)                    # "OK EURUSD seq=... \\n"

The library is found at $TICKGATE_LIB, else by the linker's search
(ctypes.util.find_library("tickgate")), else where the Debian package puts
it (/usr/lib/tickgate/libtickgate.so). A Client is for one thread at a
time; open one per thread.
"""

import ctypes
import ctypes.util
import os
from decimal import Decimal

# By bit (TICKGATE_R_*); ORDER is gate.md's order of the names.
REASONS = ["unknown_symbol", "no_data", "stale_quote", "stale_at_source", "halted", "suspect",
           "crossed"]
ORDER = [0, 1, 2, 3, 4, 6, 5]
CAUSES = [
    "",
    "gap",
    "channel_gap",
    "seq_anomaly",
    "session_change",
    "no_snapshot",
    "session_ended",
    "recovering",
]
E_SYMBOL = -2
E_LOOSER = -3
E_READ = -4
E_CLOCK = -6
E_FEED = -7
MAX_FEEDS = 64


class _Answer(ctypes.Structure):
    # include/tickgate.h, field for field.
    _fields_ = [
        ("verdict", ctypes.c_int32),
        ("reasons", ctypes.c_uint32),
        ("cause", ctypes.c_uint32),
        ("has_quote", ctypes.c_uint32),
        ("seq", ctypes.c_uint64),
        ("price_scale", ctypes.c_uint32),
        ("sides", ctypes.c_uint32),
        ("bid_px", ctypes.c_int64),
        ("bid_qty", ctypes.c_uint64),
        ("ask_px", ctypes.c_int64),
        ("ask_qty", ctypes.c_uint64),
        ("silence_ns", ctypes.c_int64),
        ("source_age_ns", ctypes.c_int64),
        ("feed_count", ctypes.c_uint32),
        ("feed_index", ctypes.c_uint8 * MAX_FEEDS),
        ("feed_reasons", ctypes.c_uint8 * MAX_FEEDS),
    ]


# The Debian package's private library directory (not on the linker's path).
PACKAGED_LIB = "/usr/lib/tickgate/libtickgate.so"


def _load():
    path = os.environ.get("TICKGATE_LIB") or ctypes.util.find_library("tickgate")
    if not path and os.path.exists(PACKAGED_LIB):
        path = PACKAGED_LIB
    if not path:
        raise OSError("libtickgate not found: set TICKGATE_LIB to libtickgate.so")
    lib = ctypes.CDLL(path)
    lib.tickgate_open.restype = ctypes.c_void_p
    lib.tickgate_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.tickgate_close.argtypes = [ctypes.c_void_p]
    lib.tickgate_check.restype = ctypes.c_int
    lib.tickgate_check.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                                   ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(_Answer)]
    lib.tickgate_check_feed.restype = ctypes.c_int
    lib.tickgate_check_feed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.POINTER(_Answer)]
    lib.tickgate_format_with.restype = ctypes.c_int64
    lib.tickgate_format_with.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Answer),
                                         ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.tickgate_generation.restype = ctypes.c_uint64
    lib.tickgate_generation.argtypes = [ctypes.c_void_p]
    lib.tickgate_retries.restype = ctypes.c_uint64
    lib.tickgate_retries.argtypes = [ctypes.c_void_p]
    lib.tickgate_answer_size.restype = ctypes.c_size_t
    lib.tickgate_strerror.restype = ctypes.c_char_p
    lib.tickgate_strerror.argtypes = [ctypes.c_int]
    if lib.tickgate_answer_size() != ctypes.sizeof(_Answer):
        raise OSError("libtickgate's tickgate_answer differs from this module's")
    return lib


_lib = None


def _get_lib():
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


class TickgateError(Exception):
    """A check refused (code < 0); `code` is the TICKGATE_E_* value."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _names(bits):
    return [REASONS[i] for i in ORDER if bits & (1 << i)]


class Answer:
    """One check's answer: `ok`, `reasons` (names in gate.md order),
    `cause`, `seq` (None when several feeds answer: no one sequence),
    `bid`/`ask` as (Decimal price, qty) or None, ages in ns, `feeds` (when
    several feeds know the symbol: [(feed name, "OK" or its first
    reason)] in config order, else []) and `line`, the socket's answer
    line."""

    def __init__(self, raw, line, feed_names):
        self.ok = raw.verdict == 0
        self.reasons = _names(raw.reasons)
        self.cause = CAUSES[raw.cause] if raw.cause < len(CAUSES) else ""
        self.has_quote = bool(raw.has_quote)
        scale = Decimal(10) ** raw.price_scale
        self.feeds = []
        for k in range(min(raw.feed_count, MAX_FEEDS)):
            # feed_names: the names of the line's feeds= items, in order.
            name = feed_names[k] if k < len(feed_names) else str(raw.feed_index[k])
            own = _names(raw.feed_reasons[k])
            self.feeds.append((name, own[0] if own else "OK"))
        self.seq = raw.seq if self.has_quote and not self.feeds else None
        self.bid = (Decimal(raw.bid_px) / scale, raw.bid_qty) if raw.sides & 1 else None
        self.ask = (Decimal(raw.ask_px) / scale, raw.ask_qty) if raw.sides & 2 else None
        self.silence_ns = raw.silence_ns if self.has_quote else None
        self.source_age_ns = raw.source_age_ns if self.has_quote else None
        self.line = line


class Client:
    def __init__(self, path=None):
        lib = _get_lib()
        err = ctypes.create_string_buffer(512)
        p = None if path is None else os.fsencode(path)
        self._c = lib.tickgate_open(p, err, len(err))
        if not self._c:
            raise OSError(err.value.decode(errors="replace"))
        self._buf = ctypes.create_string_buffer(512)

    def check(self, symbol, now_ns=0, stale_ms=None, source_ms=None, feed=None):
        """The verdict for `symbol` (str or bytes) at `now_ns`: the wall
        clock, CLOCK_REALTIME in Unix ns as time.time_ns() gives it (0:
        read it now; a value before 2001 raises E_CLOCK). A symbol the
        socket would refuse (not printable ASCII, a space, a NUL) raises
        E_SYMBOL; E_READ (a corrupt state file) is to be taken as REJECT.
        `feed` (a feed's config name) answers from that feed alone, as
        `CHECK <SYMBOL> feed=<name>`; a name no feed has raises E_FEED."""
        lib = _get_lib()
        raw = _Answer()
        sym = symbol if isinstance(symbol, bytes) else symbol.encode("utf-8")
        # ctypes would pass the bytes before a NUL only: "EUR\0X" must not
        # be answered as "EUR".
        if b"\0" in sym:
            raise TickgateError(E_SYMBOL, lib.tickgate_strerror(E_SYMBOL).decode())
        fd = None
        if feed is not None:
            fd = feed if isinstance(feed, bytes) else feed.encode("utf-8")
            if b"\0" in fd:
                raise TickgateError(E_FEED, lib.tickgate_strerror(E_FEED).decode())
        rc = lib.tickgate_check_feed(self._c, sym, fd, now_ns,
                                     -1 if stale_ms is None else stale_ms,
                                     -1 if source_ms is None else source_ms,
                                     ctypes.byref(raw))
        if rc != 0:
            raise TickgateError(rc, lib.tickgate_strerror(rc).decode())
        n = lib.tickgate_format_with(self._c, ctypes.byref(raw), sym, self._buf, len(self._buf))
        if n >= len(self._buf):
            self._buf = ctypes.create_string_buffer(n + 1)
            lib.tickgate_format_with(self._c, ctypes.byref(raw), sym, self._buf, len(self._buf))
        return Answer(raw, self._buf.value.decode("ascii"), self._feed_names())

    def _feed_names(self):
        """The feed names of the line just formatted (from feeds=)."""
        line = self._buf.value.decode("ascii")
        at = line.rfind(" feeds=")
        if at < 0:
            return []
        return [item.rsplit(":", 1)[0] for item in line[at + 7:].strip().split(",")]

    @property
    def generation(self):
        return _get_lib().tickgate_generation(self._c)

    def close(self):
        if self._c:
            _get_lib().tickgate_close(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()
