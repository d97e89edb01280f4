/*
 * What libtickgate refuses (tests/shm_ffi.rs builds and runs it):
 *
 *   refuse SHM_PATH FIFO_PATH LINK_PATH NOW_NS SYMBOL
 *
 * tickgate_open returns NULL, without blocking, for a FIFO and for a
 * symbolic link; tickgate_check refuses a now_ns that is not
 * CLOCK_REALTIME in ns; tickgate_format refuses a cause no check gives.
 * Prints one line per failed expectation; exit 0 when there is none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tickgate.h"

static int failures = 0;

static void expect(int ok, const char *what) {
    if (!ok) {
        printf("FAILED: %s\n", what);
        failures++;
    }
}

int main(int argc, char **argv) {
    char err[256];
    tickgate_client *c;
    tickgate_answer a;
    char line[512];
    int64_t now, wrong[4];
    int i, rc;
    if (argc != 6) {
        fprintf(stderr, "usage: refuse SHM FIFO LINK NOW_NS SYMBOL\n");
        return 2;
    }
    now = strtoll(argv[4], NULL, 10);

    err[0] = 0;
    c = tickgate_open(argv[2], err, sizeof err);
    expect(c == NULL, "a FIFO is refused");
    expect(strstr(err, "FIFO") != NULL, "the error says FIFO");
    tickgate_close(c);
    err[0] = 0;
    c = tickgate_open(argv[3], err, sizeof err);
    expect(c == NULL, "a symbolic link is refused");
    expect(strstr(err, "symbolic link") != NULL, "the error says symbolic link");
    tickgate_close(c);

    c = tickgate_open(argv[1], err, sizeof err);
    if (c == NULL) {
        printf("FAILED: open %s: %s\n", argv[1], err);
        return 1;
    }
    expect(tickgate_check(c, argv[5], now, -1, -1, &a) == 0, "a wall-clock now is answered");
    /* CLOCK_MONOTONIC after ~3.5 hours of uptime, then seconds, ms and
     * us of the wall clock, then a negative time. */
    wrong[0] = 12345678901234LL;
    wrong[1] = now / 1000000000LL;
    wrong[2] = now / 1000LL;
    wrong[3] = -now;
    for (i = 0; i < 4; i++) {
        rc = tickgate_check(c, argv[5], wrong[i], -1, -1, &a);
        if (rc != TICKGATE_E_CLOCK) {
            printf("FAILED: now_ns=%lld gave %d\n", (long long)wrong[i], rc);
            failures++;
        }
    }
    expect(strstr(tickgate_strerror(TICKGATE_E_CLOCK), "CLOCK_REALTIME") != NULL,
           "TICKGATE_E_CLOCK is described");

    expect(tickgate_check(c, argv[5], now, -1, -1, &a) == 0, "answered again");
    a.cause = TICKGATE_CAUSE_RECOVERING;
    expect(tickgate_format_with(c, &a, argv[5], line, sizeof line) > 0, "cause 7 is formatted");
    a.cause = TICKGATE_CAUSE_RECOVERING + 1;
    expect(tickgate_format_with(c, &a, argv[5], line, sizeof line) == TICKGATE_E_ARG,
           "an unknown cause is refused");
    a.cause = 256 + TICKGATE_CAUSE_GAP;
    expect(tickgate_format_with(c, &a, argv[5], line, sizeof line) == TICKGATE_E_ARG,
           "a cause that truncates to a known one is refused");
    tickgate_close(c);
    printf("%d failures\n", failures);
    return failures != 0;
}
