"""Runnable examples for sagacity-agents."""
