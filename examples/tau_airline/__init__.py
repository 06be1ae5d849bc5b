"""τ-bench airline domain: store, tools, undos and invariants (no saga dependency).

The data stays outside the repository (``../shared/tau-airline`` by default);
see :mod:`.store` for how the data folder is located.
"""
