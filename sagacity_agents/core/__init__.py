"""The saga core: journal, hash chain, compensation, approvals.

Nothing in this package imports the Agents SDK; an adapter for another agent framework can be
written against it without changing a line here.
"""
