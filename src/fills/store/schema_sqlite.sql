-- tickgate fills store, SQLite flavour of schema version 1.
-- Same tables and columns as schema_postgres.sql, plus the per-position
-- chain (fills.prev_deal_id, positions.last_deal_id) that replaces the
-- fills_history index here; decimals are TEXT (exact, written by
-- rust_decimal), times are Unix nanoseconds.

-- F1/F2: identity of an event is (kind, event_id).
CREATE TABLE processed_events (
    kind        TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    created_ns  INTEGER NOT NULL,
    PRIMARY KEY (kind, event_id)
) WITHOUT ROWID;
-- F5: the sweeper's sub-select walks this index.
CREATE INDEX processed_events_created ON processed_events (created_ns);

-- One row per deal; deal_id unique (F2, F3). status: applied | busted |
-- bust_held (a BUST waiting for its FILL: fill columns NULL).
-- Schema version 3 (F2) re-keys this table by (account, deal_id), account
-- NOT NULL (a held BUST's row has the BUST's account): SCHEMA_V3 in
-- sqlite.rs; version 5 stores the same key in (deal_id, account) order
-- (SCHEMA_V5). This file stays version 1, the start of the migrations.
CREATE TABLE fills (
    deal_id        TEXT    NOT NULL PRIMARY KEY,
    status         TEXT    NOT NULL CHECK (status IN ('applied', 'busted', 'bust_held')),
    fill_event_id  TEXT,
    account        TEXT,
    symbol         TEXT,
    side           TEXT CHECK (side IN ('BUY', 'SELL')),
    qty            TEXT,
    price          TEXT,
    exec_ns        INTEGER,
    bust_event_id  TEXT,
    bust_account   TEXT,
    bust_ns        INTEGER,
    applied_seq    INTEGER,
    -- The FILL applied to the same (account, symbol) just before this one:
    -- a chain from positions.last_deal_id back to the first fill, walked
    -- by primary key to replay a position when a BUST arrives. It replaces
    -- an index on (account, symbol, applied_seq), whose inserts land on a
    -- different page for every position and made up more than a quarter of the
    -- cost of a batch; the chain costs one column in a row that is
    -- written anyway.
    prev_deal_id   TEXT,
    created_ns     INTEGER NOT NULL,
    updated_ns     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX fills_held ON fills (deal_id) WHERE status = 'bust_held';

-- F6.
CREATE TABLE positions (
    account       TEXT    NOT NULL,
    symbol        TEXT    NOT NULL,
    qty           TEXT    NOT NULL,
    avg_price     TEXT    NOT NULL,
    realized_pnl  TEXT    NOT NULL,
    -- Head of the chain of fills applied to this position (see fills).
    last_deal_id  TEXT,
    updated_ns    INTEGER NOT NULL,
    PRIMARY KEY (account, symbol)
) WITHOUT ROWID;

-- K2-K4: status and body are written in the transaction that inserted the row.
CREATE TABLE idempotency_keys (
    client        TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    request_hash  TEXT    NOT NULL,
    status        INTEGER,
    body          BLOB,
    created_ns    INTEGER NOT NULL,
    PRIMARY KEY (client, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_ns);

CREATE TABLE consumer_positions (
    stream      TEXT    NOT NULL,
    consumer    TEXT    NOT NULL,
    last_seq    INTEGER NOT NULL,
    updated_ns  INTEGER NOT NULL,
    PRIMARY KEY (stream, consumer)
) WITHOUT ROWID;

CREATE TABLE dead_letters (
    id          INTEGER PRIMARY KEY,
    source      TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    deal_id     TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    created_ns  INTEGER NOT NULL
);

-- SQLite has no sequences: the application sequence of fills.
CREATE TABLE counters (
    name   TEXT    NOT NULL PRIMARY KEY,
    value  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('fills_applied_seq', 0);
