-- Journal schema for SQLite. The canonical bytes are stored as they were hashed (BLOB) and the
-- payload lives only inside them; the other columns are an index that verification checks
-- against the bytes.
CREATE TABLE IF NOT EXISTS sagacity_journal (
    saga_id     TEXT    NOT NULL,
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    phase       TEXT    NOT NULL,
    tool        TEXT,
    call_id     TEXT,
    write_key   TEXT    NOT NULL,
    recorded_at TEXT    NOT NULL,
    prev_hash   TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    canonical   BLOB    NOT NULL,
    tag_key     TEXT,                 -- the key whose tag authenticates the entry (issue 19)
    tag         TEXT,                 -- Ed25519 over its content without chain links; NULL: none
    sealed      BLOB,                 -- its sensitive values, encrypted; NULL: none
    PRIMARY KEY (saga_id, seq),
    UNIQUE (saga_id, write_key)
);
-- Each saga's data key, per generation, only ever WRAPPED by the master key (core/data_keys.py).
-- An erasure deletes the row (under PRAGMA secure_delete) and inserts a tombstone: wrapped NULL,
-- who erased it, when and why.
CREATE TABLE IF NOT EXISTS sagacity_data_keys (
    saga_id       TEXT    NOT NULL,
    generation    INTEGER NOT NULL CHECK (generation >= 1),
    master_key_id TEXT,
    wrapped       BLOB,
    created_at    TEXT    NOT NULL,
    erased_at     TEXT,
    erased_by     TEXT,
    reason        TEXT,
    PRIMARY KEY (saga_id, generation)
);
-- The journal's own facts (its random id, "journal_id": core.identity); never a list of sagas.
CREATE TABLE IF NOT EXISTS sagacity_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- No table lists the sagas: the list of sagas is derived from these rows (a side table could be pruned
-- to hide a saga from verification). Files written by earlier versions may still hold an unused
-- sagacity_sagas table; nothing reads it.
