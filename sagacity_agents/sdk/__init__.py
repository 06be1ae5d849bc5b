"""The adapter for the OpenAI Agents SDK (``openai-agents``): tool decorators, run hooks, facade.

This is the only package (with the CLI and the demo) that imports the Agents SDK.
"""

from .tracing import install as _install_tracing

_install_tracing()  # the saga's spans and trace ids in the SDK's trace (sdk/tracing.py)
