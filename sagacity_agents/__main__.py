"""``python -m sagacity_agents``: the ``sagacity`` command line."""

from .cli import main

main()
