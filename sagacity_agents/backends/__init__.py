"""Storage backends: each folder implements the core's protocols (``core.journal.Journal``,
``core.approval.ApprovalStore``, ``core.checkpoints.CheckpointStore``) for one kind of storage,
with the same module names in each (``journal``, ``approvals``, ``setup``, ``checkpoints``).

A backend imports the core; the core imports no backend. ``sagacity_agents.stores`` is the one
place that maps a location (a path, ``:memory:``, a ``postgresql://`` URI) to a backend.
"""
