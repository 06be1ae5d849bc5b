"""The PostgreSQL backend (the ``postgres`` extra, psycopg 3 and psycopg_pool): the journal, the
approval store and the signed-checkpoint store for many workers on many hosts. ``setup`` holds the
connection pools; its versioned migrations ship in ``sql/journal/`` and ``sql/checkpoints/``."""
