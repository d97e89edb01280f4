-- tickgate fills store, PostgreSQL flavour of schema version 1.
-- Same tables and columns as schema_sqlite.sql; times are Unix nanoseconds
-- (the application's clock, so retention and tests agree across backends).

-- F1/F2: identity of an event is (kind, event_id).
CREATE TABLE processed_events (
    kind        text   NOT NULL,
    event_id    text   NOT NULL,
    created_ns  bigint NOT NULL,
    PRIMARY KEY (kind, event_id)
);
-- F5: the sweeper's sub-select walks this index.
CREATE INDEX processed_events_created ON processed_events (created_ns);

-- One row per deal; deal_id unique (F2, F3). status: applied | busted |
-- bust_held (a BUST waiting for its FILL: fill columns NULL). Keeping the
-- held BUST in the deal's own row makes the unique index serialise a FILL
-- and its BUST committed concurrently by two instances.
-- Schema version 3 (F2) re-keys this table by (account, deal_id), account
-- NOT NULL (a held BUST's row has the BUST's account): SCHEMA_V3 in
-- postgres.rs. This file stays version 1, the start of the migrations.
CREATE SEQUENCE fills_applied_seq;
CREATE TABLE fills (
    deal_id        text    NOT NULL PRIMARY KEY,
    status         text    NOT NULL CHECK (status IN ('applied', 'busted', 'bust_held')),
    fill_event_id  text,
    account        text,
    symbol         text,
    side           text CHECK (side IN ('BUY', 'SELL')),
    qty            numeric,
    price          numeric,
    exec_ns        bigint,
    bust_event_id  text,
    bust_account   text,
    bust_ns        bigint,
    applied_seq    bigint,
    created_ns     bigint  NOT NULL,
    updated_ns     bigint  NOT NULL
);
CREATE INDEX fills_history ON fills (account, symbol, applied_seq) WHERE status = 'applied';
CREATE INDEX fills_held ON fills (deal_id) WHERE status = 'bust_held';

-- F6.
CREATE TABLE positions (
    account       text    NOT NULL,
    symbol        text    NOT NULL,
    qty           numeric NOT NULL,
    avg_price     numeric NOT NULL,
    realized_pnl  numeric NOT NULL,
    updated_ns    bigint  NOT NULL,
    PRIMARY KEY (account, symbol)
);

-- K2-K4: status and body are written in the transaction that inserted the
-- row; a concurrent insert of the same key waits on that row (K5).
CREATE TABLE idempotency_keys (
    client        text   NOT NULL,
    key           text   NOT NULL,
    request_hash  text   NOT NULL,
    status        integer,
    body          bytea,
    created_ns    bigint NOT NULL,
    PRIMARY KEY (client, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_ns);

CREATE TABLE consumer_positions (
    stream      text   NOT NULL,
    consumer    text   NOT NULL,
    last_seq    bigint NOT NULL,
    updated_ns  bigint NOT NULL,
    PRIMARY KEY (stream, consumer)
);

CREATE TABLE dead_letters (
    id          bigserial PRIMARY KEY,
    source      text   NOT NULL,
    kind        text   NOT NULL,
    event_id    text   NOT NULL,
    deal_id     text   NOT NULL,
    reason      text   NOT NULL,
    created_ns  bigint NOT NULL
);
