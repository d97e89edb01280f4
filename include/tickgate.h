/*
 * libtickgate: the pre-trade check from tickgate's shared state file,
 * without a round trip to the daemon (docs/shm.md). Link with
 * -ltickgate (built by `cargo build -p tickgate-c`).
 *
 * The verdict and the answer text are exactly the gate socket's
 * (gate.md). A client is used by one thread at a time; open one per
 * thread. Nothing here allocates per check.
 *
 * Kept in step with clients/c/src/lib.rs by tests/shm_c.rs.
 */
#ifndef TICKGATE_H
#define TICKGATE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An open client (opaque). */
typedef struct tickgate_client tickgate_client;

/* tickgate_answer.verdict */
#define TICKGATE_OK 0
#define TICKGATE_REJECT 1

/* tickgate_answer.reasons: bits in gate.md's reason order. */
#define TICKGATE_R_UNKNOWN_SYMBOL 1
#define TICKGATE_R_NO_DATA 2
#define TICKGATE_R_STALE_QUOTE 4
#define TICKGATE_R_STALE_AT_SOURCE 8
#define TICKGATE_R_HALTED 16
#define TICKGATE_R_SUSPECT 32
/* Several feeds: one feed's bid stays above another's offer (gate.md "One
 * symbol on several feeds"); written after halted, before suspect. */
#define TICKGATE_R_CROSSED 64

/* tickgate_answer.cause (set exactly when TICKGATE_R_SUSPECT is). */
#define TICKGATE_CAUSE_NONE 0
#define TICKGATE_CAUSE_GAP 1
#define TICKGATE_CAUSE_CHANNEL_GAP 2
#define TICKGATE_CAUSE_SEQ_ANOMALY 3
#define TICKGATE_CAUSE_SESSION_CHANGE 4
#define TICKGATE_CAUSE_NO_SNAPSHOT 5
#define TICKGATE_CAUSE_SESSION_ENDED 6
/* recovery.md R3: the feed has an open hole (layout version 2). */
#define TICKGATE_CAUSE_RECOVERING 7

/* tickgate_answer.sides */
#define TICKGATE_SIDE_BID 1
#define TICKGATE_SIDE_ASK 2

/* Prices are fixed-point: px / 10^TICKGATE_PRICE_SCALE. */
#define TICKGATE_PRICE_SCALE 9

/* Return codes (0: answered). */
#define TICKGATE_E_ARG (-1)
#define TICKGATE_E_SYMBOL (-2)
#define TICKGATE_E_LOOSER (-3)
#define TICKGATE_E_READ (-4)
#define TICKGATE_E_PANIC (-5)
#define TICKGATE_E_CLOCK (-6)
#define TICKGATE_E_FEED (-7)

/* Most feeds an answer names (tickgate_answer.feed_index). */
#define TICKGATE_MAX_FEEDS 64

/* The answer of one check. Quote fields are meaningful when has_quote.
 * When several feeds know the symbol (gate.md "One symbol on several
 * feeds"), feed_count says how many: the quote is the best across the
 * feeds that count, the ages the largest, seq means nothing (the line says
 * seq=-), and feed_index/feed_reasons give each feed's own verdict for
 * feeds=. */
typedef struct tickgate_answer {
    int32_t verdict;       /* TICKGATE_OK or TICKGATE_REJECT */
    uint32_t reasons;      /* TICKGATE_R_* bits; 0 when OK */
    uint32_t cause;        /* TICKGATE_CAUSE_* */
    uint32_t has_quote;    /* 1: seq, sides and ages below are set */
    uint64_t seq;          /* the symbol's last_seq as last set */
    uint32_t price_scale;  /* always TICKGATE_PRICE_SCALE */
    uint32_t sides;        /* TICKGATE_SIDE_* bits: which sides exist */
    int64_t bid_px;
    uint64_t bid_qty;
    int64_t ask_px;
    uint64_t ask_qty;
    int64_t silence_ns;    /* now - alive */
    int64_t source_age_ns; /* now - quote source time - clock offset */
    uint32_t feed_count;   /* feeds that know the symbol when several do (seq=-, feeds=), else 0 */
    uint8_t feed_index[64];   /* each such feed, in config order: its index in the file */
    uint8_t feed_reasons[64]; /* its own verdict's TICKGATE_R_* bits (0: OK) */
} tickgate_answer;

/* Opens the state file at path (NULL: $TICKGATE_SHM, else
 * /run/tickgate/state.shm). NULL on error, with the reason in err
 * (err_len bytes, NUL-terminated; err may be NULL). Never blocks: a path
 * that is a FIFO, a device, a directory or a symbolic link is refused. */
tickgate_client *tickgate_open(const char *path, char *err, size_t err_len);

/* Closes a client (NULL is ignored). */
void tickgate_close(tickgate_client *c);

/* Checks symbol (1 to 20 printable ASCII characters; a longer one is
 * answered unknown_symbol) at now_ns; stale_ms and source_ms tighten the configured
 * thresholds (< 0: as configured). Returns 0 with *out filled (OK or
 * REJECT), or a TICKGATE_E_* code; TICKGATE_E_READ (a state file that is
 * not what tickgate writes, e.g. an unknown cause code in a slot) is to be
 * taken as REJECT.
 *
 * now_ns is the wall clock, CLOCK_REALTIME in Unix nanoseconds
 * (clock_gettime(CLOCK_REALTIME) as tv_sec * 1000000000 + tv_nsec): the
 * clock of the daemon's receive timestamps. 0 reads it for you. A value
 * before 2001-09-09 (1000000000000000000) cannot be that clock (it would
 * be CLOCK_MONOTONIC, or seconds, ms or us) and gives TICKGATE_E_CLOCK. */
int tickgate_check(tickgate_client *c, const char *symbol, int64_t now_ns,
                   int64_t stale_ms, int64_t source_ms, tickgate_answer *out);

/* tickgate_check with feed=<name> (gate.md): that feed's verdict alone
 * (feed NULL: every feed that knows the symbol). TICKGATE_E_FEED when no
 * feed has that name. */
int tickgate_check_feed(tickgate_client *c, const char *symbol, const char *feed,
                        int64_t now_ns, int64_t stale_ms, int64_t source_ms,
                        tickgate_answer *out);

/* The socket's answer line for a (asked as symbol), '\n' included,
 * NUL-terminated into buf when it fits in len. Returns the line's length
 * without the NUL (>= len: did not fit), or TICKGATE_E_ARG (also for a
 * cause above TICKGATE_CAUSE_RECOVERING, and for an answer with
 * feed_count > 0, whose feed names only a client knows: use
 * tickgate_format_with). */
int64_t tickgate_format(const tickgate_answer *a, const char *symbol,
                        char *buf, size_t len);

/* As tickgate_format, for every answer: the feed names of feeds= are
 * those of the file c maps. */
int64_t tickgate_format_with(const tickgate_client *c, const tickgate_answer *a,
                             const char *symbol, char *buf, size_t len);

/* The generation of the file mapped now (changes on every daemon start). */
uint64_t tickgate_generation(const tickgate_client *c);

/* Seqlock retries this client took. */
uint64_t tickgate_retries(const tickgate_client *c);

/* sizeof(tickgate_answer) as the library was built. */
size_t tickgate_answer_size(void);

/* A static description of a return code. */
const char *tickgate_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* TICKGATE_H */
