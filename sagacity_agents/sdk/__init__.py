"""The adapter for the OpenAI Agents SDK (``openai-agents``): tool decorators, run hooks, facade.

This is the only package (with the CLI and the demo) that imports the Agents SDK.
"""
