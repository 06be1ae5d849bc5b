"""The SQLite backend, the embedded default: the journal and the approval store in one file,
opened the same way (``setup``), with their schemas in ``sql/``.

Internal: import its classes from ``sagacity_agents.backends``.
"""
