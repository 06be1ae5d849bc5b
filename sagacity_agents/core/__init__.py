"""The saga core: journal, hash chain, compensation, approvals.

Nothing in this package imports the Agents SDK; an adapter for another agent framework can be
written against it without changing a line here.

Internal: its modules may change in any release. What is public is re-exported by the doors
(``sagacity_agents``, ``.saga``, ``.evidence``, ``.approvals``, ``.backends``, ``.errors``;
docs/api.md).
"""
