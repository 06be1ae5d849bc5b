"""The PostgreSQL backend (the ``postgres`` extra, psycopg 3 and psycopg_pool): the journal, the
approval store and the signed-checkpoint store for many workers on many hosts. ``setup`` holds the
connection pools, ``migrations`` the versioned migrations (shipped in ``sql/journal/`` and
``sql/checkpoints/``) and the schema check, ``driver`` the psycopg import and URI checks both use.

Internal: import its classes from ``sagacity_agents.backends``.
"""
