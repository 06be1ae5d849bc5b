"""The package and a file using its public API type-check with mypy (the package ships py.typed).

mypy runs as long as it takes (no wall-clock limit): a loaded machine makes the test slower,
never failing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_package_and_public_api_usage_type_check():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--no-error-summary",
         "sagacity_agents", "tests/typing/usage.py"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
