"""The directory backend: signed checkpoints as files in a directory (``checkpoints``), for a
checkpoint location that is not a ``postgresql://`` URI. Put the directory on storage the
journal's writers cannot rewrite: another host, WORM, a separate account.

Internal: import its classes from ``sagacity_agents.backends``.
"""
