/*
 * Asks the gate socket and libtickgate the same checks and compares the
 * answer lines byte for byte (tests/shm_ffi.rs builds and runs it).
 *
 *   check SHM_PATH SOCKET_PATH NOW_NS REQUEST...
 *
 * Each REQUEST is "SYMBOL" or "SYMBOL STALE_MS SOURCE_MS [FEED]" (-1: as
 * configured), sent to the socket as the equivalent CHECK line. Exit 0
 * when every answer matches, 1 otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tickgate.h"

static int connect_to(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    strncpy(a.sun_path, path, sizeof a.sun_path - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("connect");
        exit(2);
    }
    return fd;
}

/* One answer line from the socket, '\n' included. */
static void ask(int fd, const char *req, char *line, size_t len) {
    size_t n = 0;
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
        perror("write");
        exit(2);
    }
    while (n + 1 < len) {
        char c;
        if (read(fd, &c, 1) != 1) {
            perror("read");
            exit(2);
        }
        line[n++] = c;
        if (c == '\n')
            break;
    }
    line[n] = 0;
}

int main(int argc, char **argv) {
    char err[256];
    char want[512], got[512], req[256], sym[64];
    int failures = 0, i;
    if (argc < 4) {
        fprintf(stderr, "usage: check SHM SOCKET NOW_NS REQUEST...\n");
        return 2;
    }
    if (tickgate_answer_size() != sizeof(tickgate_answer)) {
        fprintf(stderr, "header and library disagree on tickgate_answer\n");
        return 1;
    }
    if (tickgate_open("/nonexistent/state.shm", err, sizeof err) != NULL || strlen(err) == 0) {
        fprintf(stderr, "opening a missing file must fail with a reason\n");
        return 1;
    }
    tickgate_client *c = tickgate_open(argv[1], err, sizeof err);
    if (!c) {
        fprintf(stderr, "tickgate_open: %s\n", err);
        return 1;
    }
    if (tickgate_generation(c) == 0) {
        fprintf(stderr, "generation 0\n");
        return 1;
    }
    long long now = atoll(argv[3]);
    int fd = connect_to(argv[2]);
    for (i = 4; i < argc; i++) {
        long long stale = -1, source = -1;
        char feed[64] = "";
        char opts[160] = "";
        tickgate_answer a;
        sscanf(argv[i], "%63s %lld %lld %63s", sym, &stale, &source, feed);
        if (stale >= 0)
            snprintf(opts + strlen(opts), sizeof opts - strlen(opts), " stale_ms=%lld", stale);
        if (source >= 0)
            snprintf(opts + strlen(opts), sizeof opts - strlen(opts), " source_ms=%lld", source);
        if (feed[0])
            snprintf(opts + strlen(opts), sizeof opts - strlen(opts), " feed=%s", feed);
        snprintf(req, sizeof req, "CHECK %s%s\n", sym, opts);
        ask(fd, req, want, sizeof want);
        int rc = tickgate_check_feed(c, sym, feed[0] ? feed : NULL, now, stale, source, &a);
        if (rc == TICKGATE_E_LOOSER || rc == TICKGATE_E_FEED) {
            snprintf(got, sizeof got, "ERR %s\n", tickgate_strerror(rc));
        } else if (rc != 0) {
            snprintf(got, sizeof got, "error %d: %s\n", rc, tickgate_strerror(rc));
        } else {
            int64_t len = tickgate_format_with(c, &a, sym, got, sizeof got);
            if (len <= 0 || (size_t)len >= sizeof got || strlen(got) != (size_t)len) {
                fprintf(stderr, "tickgate_format_with returned %lld\n", (long long)len);
                return 1;
            }
            /* Without the names, only a one-feed answer can be written. */
            if ((tickgate_format(&a, sym, NULL, 0) == TICKGATE_E_ARG) != (a.feed_count > 0)) {
                fprintf(stderr, "tickgate_format and feed_count disagree for %s\n", sym);
                failures++;
            }
            /* The struct agrees with the line. */
            if ((a.verdict == TICKGATE_OK) != (strncmp(got, "OK ", 3) == 0) ||
                (a.verdict == TICKGATE_OK) != (a.reasons == 0) ||
                ((a.reasons & TICKGATE_R_SUSPECT) != 0) != (a.cause != TICKGATE_CAUSE_NONE) ||
                a.price_scale != TICKGATE_PRICE_SCALE) {
                fprintf(stderr, "inconsistent answer struct for %s\n", sym);
                failures++;
            }
        }
        if (strcmp(want, got) != 0) {
            fprintf(stderr, "%s: socket %s        lib    %s", req, want, got);
            failures++;
        }
    }
    /* A buffer too small is reported, not overrun. */
    {
        tickgate_answer a;
        char tiny[4] = {'x', 'x', 'x', 'x'};
        if (tickgate_check(c, "EURUSD", now, -1, -1, &a) != 0 ||
            tickgate_format_with(c, &a, "EURUSD", tiny, sizeof tiny) < 4 || tiny[0] != 'x') {
            fprintf(stderr, "small buffer mishandled\n");
            failures++;
        }
        if (tickgate_check(c, "EUR USD", now, -1, -1, &a) != TICKGATE_E_SYMBOL ||
            tickgate_check(NULL, "EURUSD", now, -1, -1, &a) != TICKGATE_E_ARG) {
            fprintf(stderr, "bad arguments not refused\n");
            failures++;
        }
    }
    close(fd);
    tickgate_close(c);
    printf("%d checks, %d mismatches\n", argc - 4, failures);
    return failures ? 1 : 0;
}
