"""``python -m sagacity_agents.cli``: the ``sagacity`` command line."""

from . import main

main()
