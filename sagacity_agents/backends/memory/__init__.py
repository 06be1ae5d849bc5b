"""The in-memory backend: a journal and an approval store for one process (tests, one-off
runs). Nothing survives the process.

Internal: import its classes from ``sagacity_agents.backends``.
"""
