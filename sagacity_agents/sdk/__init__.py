"""The adapter for the OpenAI Agents SDK (``openai-agents``): tool decorators, run hooks, facade.

This is the only package (with the CLI and the demo) that imports the Agents SDK.

Internal: its modules may change in any release. What is public is re-exported, loaded on first
use, by the doors (``sagacity_agents``, ``.saga``, ``.approvals``, ``.guardrails``, ``.errors``;
docs/api.md).
"""

from .tracing import install as _install_tracing

_install_tracing()  # the saga's spans and trace ids in the SDK's trace (sdk/tracing.py)
