"""Run by tests/shm_ffi.rs: the module's answers equal the gate socket's,
byte for byte, for the rig's symbols at its clock.

Environment: TICKGATE_LIB, TICKGATE_TEST_SHM, TICKGATE_TEST_SOCK,
TICKGATE_TEST_NOW (ns), TICKGATE_TEST_SYMBOLS (comma-separated).
"""

import os
import socket
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tickgate  # noqa: E402


def socket_answer(sock, line):
    sock.sendall(line.encode() + b"\n")
    out = b""
    while not out.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise EOFError("socket closed")
        out += chunk
    return out.decode()


class Conformance(unittest.TestCase):
    def test_answers_equal_the_socket(self):
        now = int(os.environ["TICKGATE_TEST_NOW"])
        symbols = os.environ["TICKGATE_TEST_SYMBOLS"].split(",")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.environ["TICKGATE_TEST_SOCK"])
        with tickgate.Client(os.environ["TICKGATE_TEST_SHM"]) as c:
            self.assertNotEqual(c.generation, 0)
            seen_ok = seen_reject = seen_across = False
            for sym in symbols:
                a = c.check(sym, now_ns=now)
                self.assertEqual(a.line, socket_answer(s, "CHECK " + sym), sym)
                self.assertEqual(a.ok, a.line.startswith("OK "))
                self.assertEqual(a.ok, not a.reasons)
                seen_ok |= a.ok
                seen_reject |= not a.ok
                if a.has_quote and not a.feeds:
                    self.assertIn(" seq=%d " % a.seq, a.line)
                if a.feeds:
                    # Several feeds: seq=- and feeds= as the struct says.
                    self.assertIsNone(a.seq)
                    self.assertIn(" seq=- ", a.line)
                    items = ",".join("%s:%s" % f for f in a.feeds)
                    self.assertTrue(a.line.endswith(" feeds=%s\n" % items), a.line)
                    seen_across = True
                    for name, _ in a.feeds:
                        one = c.check(sym, now_ns=now, feed=name)
                        self.assertEqual(one.line,
                                         socket_answer(s, "CHECK %s feed=%s" % (sym, name)))
                        self.assertEqual(one.feeds, [])
                t = c.check(sym, now_ns=now, stale_ms=1, source_ms=1)
                want = socket_answer(s, "CHECK %s stale_ms=1 source_ms=1" % sym)
                self.assertEqual(t.line, want, sym)
            self.assertTrue(seen_ok and seen_reject, "both kinds of answer exercised")
            self.assertTrue(seen_across, "a symbol on several feeds exercised")
            with self.assertRaises(tickgate.TickgateError) as e:
                c.check(symbols[0], now_ns=now, feed="nofeed")
            self.assertEqual(e.exception.code, tickgate.E_FEED)
            with self.assertRaises(tickgate.TickgateError) as e:
                c.check(symbols[0], now_ns=now, stale_ms=10**9)
            self.assertEqual(e.exception.code, tickgate.E_LOOSER)
        with self.assertRaises(OSError):
            tickgate.Client("/nonexistent/state.shm")
        s.close()


class Refusals(unittest.TestCase):
    def test_a_fifo_is_refused_without_blocking(self):
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "state.shm")
            os.mkfifo(fifo)
            # A writer holds it open, so that a client opening it the old
            # way (blocking, for reading) would not hang but map nothing;
            # without one, that open never returns.
            w = os.open(fifo, os.O_RDWR)
            try:
                with self.assertRaises(OSError) as e:
                    tickgate.Client(fifo)
                self.assertIn("FIFO", str(e.exception))
            finally:
                os.close(w)
            link = os.path.join(d, "link.shm")
            os.symlink(os.environ["TICKGATE_TEST_SHM"], link)
            with self.assertRaises(OSError) as e:
                tickgate.Client(link)
            self.assertIn("symbolic link", str(e.exception))

    def test_symbols_and_clocks_the_socket_would_refuse(self):
        now = int(os.environ["TICKGATE_TEST_NOW"])
        sym = os.environ["TICKGATE_TEST_SYMBOLS"].split(",")[0]
        with tickgate.Client(os.environ["TICKGATE_TEST_SHM"]) as c:
            for bad in [sym + "\0", sym[:3] + "\0" + sym[3:], "\0", sym.encode() + b"\0X"]:
                with self.assertRaises(tickgate.TickgateError) as e:
                    c.check(bad, now_ns=now)
                self.assertEqual(e.exception.code, tickgate.E_SYMBOL, repr(bad))
            with self.assertRaises(tickgate.TickgateError) as e:
                c.check(sym + "\u00e9", now_ns=now)
            self.assertEqual(e.exception.code, tickgate.E_SYMBOL)
            # Monotonic-clock, second, ms and us readings are not the
            # wall clock in ns.
            for wrong in [12_345_678_901_234, now // 10**9, now // 10**6, now // 1000, -now]:
                with self.assertRaises(tickgate.TickgateError) as e:
                    c.check(sym, now_ns=wrong)
                self.assertEqual(e.exception.code, tickgate.E_CLOCK, wrong)
            self.assertEqual(c.check(sym, now_ns=now).line.split()[1], sym)


if __name__ == "__main__":
    unittest.main()
