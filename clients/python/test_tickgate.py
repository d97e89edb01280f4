"""Run by tests/shm_ffi.rs: the module's answers equal the gate socket's,
byte for byte, for the rig's symbols at its clock.

Environment: TICKGATE_LIB, TICKGATE_TEST_SHM, TICKGATE_TEST_SOCK,
TICKGATE_TEST_NOW (ns), TICKGATE_TEST_SYMBOLS (comma-separated).
"""

import os
import socket
import sys
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
            seen_ok = seen_reject = False
            for sym in symbols:
                a = c.check(sym, now_ns=now)
                self.assertEqual(a.line, socket_answer(s, "CHECK " + sym), sym)
                self.assertEqual(a.ok, a.line.startswith("OK "))
                self.assertEqual(a.ok, not a.reasons)
                seen_ok |= a.ok
                seen_reject |= not a.ok
                if a.has_quote:
                    self.assertIn(" seq=%d " % a.seq, a.line)
                t = c.check(sym, now_ns=now, stale_ms=1, source_ms=1)
                want = socket_answer(s, "CHECK %s stale_ms=1 source_ms=1" % sym)
                self.assertEqual(t.line, want, sym)
            self.assertTrue(seen_ok and seen_reject, "both kinds of answer exercised")
            with self.assertRaises(tickgate.TickgateError) as e:
                c.check(symbols[0], now_ns=now, stale_ms=10**9)
            self.assertEqual(e.exception.code, tickgate.E_LOOSER)
        with self.assertRaises(OSError):
            tickgate.Client("/nonexistent/state.shm")
        s.close()


if __name__ == "__main__":
    unittest.main()
