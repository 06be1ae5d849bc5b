"""Run the openai-agents 0.24.0 test suite with every ``function_tool`` wrapped by ours.

Not part of the project's ``pytest`` (no ``test_`` file here). It answers two questions:
does wrapping every tool of the SDK's own tests with ``@read_only`` change anything the SDK's
tests check (*outside a saga*), and what changes when every run is also inside a saga?

Set-up (once; any directory)::

    pip download openai-agents==0.24.0 --no-binary :all: --no-deps -d /tmp/sdk-sdist
    tar xzf /tmp/sdk-sdist/openai_agents-0.24.0.tar.gz -C /tmp/sdk-sdist
    pip install -e ".[test]" pytest-asyncio pytest-mock inline-snapshot   # this repository

Run::

    python tests/sdk_suite/run_sdk_suite.py /tmp/sdk-sdist/openai_agents-0.24.0 [--modes plain,wrapped,saga]
        [--all] [--policy continue|stop] [--out DIR] [--baseline DIR/plain.xml]

It runs pytest in the sdist directory once per mode (``sdk_plugin.py`` says what each mode does),
on every test module that mentions ``function_tool`` (``--all``: the whole suite), reads the JUnit
XML reports and prints, for ``wrapped`` and ``saga``, the *regressions*: tests that pass in
``plain`` and do not pass in that mode, by file, with the first line of each failure. Exit status
0 always; the figures are the output. The SDK tests whose outcome does not depend on us (missing
optional extras, network) fail or skip alike in every mode and are not regressions.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _modules(sdist: Path, everything: bool) -> list[str]:
    if everything:
        return ["tests"]
    found = []
    for path in sorted((sdist / "tests").rglob("test_*.py")):
        if "function_tool" in path.read_text(encoding="utf-8", errors="replace"):
            found.append(str(path.relative_to(sdist)))
    return found


def _run(sdist: Path, mode: str, modules: list[str], out: Path, policy: str) -> Path:
    report = out / f"{mode}.xml"
    env = dict(os.environ, SAGACITY_SDK_SUITE_MODE=mode, SAGACITY_SDK_SUITE_POLICY=policy,
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sdk_plugin",
           "-o", "addopts=", "--continue-on-collection-errors", f"--junitxml={report}", *modules]
    print(f"[{mode}] {' '.join(cmd[:8])} ... ({len(modules)} paths)", flush=True)
    done = subprocess.run(cmd, cwd=sdist, env=env, capture_output=True, text=True, check=False)
    tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"[{mode}] {tail[0]}", flush=True)
    return report


def _results(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the failure message)."""
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = child.tag
                message = (child.get("message") or "").strip().splitlines()[:1]
                message = message[0][:200] if message else ""
                break
            if child.tag == "skipped":
                outcome = "skipped"
        results[test_id] = (outcome, message)
    return results


def main() -> None:
    """Parse arguments, run each mode, print the regressions against ``plain``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, help="the unpacked openai_agents-0.24.0 directory")
    parser.add_argument("--modes", default="plain,wrapped,saga")
    parser.add_argument("--all", action="store_true", help="the whole suite, not only the "
                        "modules that mention function_tool")
    parser.add_argument("--policy", choices=("continue", "stop"), default="continue")
    parser.add_argument("--out", type=Path, default=Path("/tmp/sagacity-sdk-suite"))
    parser.add_argument("--baseline", type=Path, help="a plain.xml of an earlier run to compare "
                        "with, instead of running the plain mode again")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    modules = _modules(args.sdist.resolve(), args.all)
    modes = args.modes.split(",")
    reports = {m: _results(_run(args.sdist.resolve(), m, modules, args.out, args.policy))
               for m in modes}
    base = _results(args.baseline) if args.baseline else reports.get("plain")
    if base is None:
        return
    for mode in modes:
        if mode == "plain":
            continue
        regressions = {t: r for t, r in reports[mode].items()
                       if base.get(t, ("", ""))[0] == "passed" and r[0] != "passed"}
        by_file: dict[str, list[str]] = defaultdict(list)
        for test_id, (_outcome, message) in sorted(regressions.items()):
            by_file[test_id.split("::")[0]].append(f"{test_id.split('::')[-1]}: {message}")
        passed = sum(1 for r in base.values() if r[0] == "passed")
        print(f"\n== {mode}: {len(regressions)} regressions of {passed} tests passing in plain")
        for name, lines in sorted(by_file.items()):
            print(f"  {name} ({len(lines)})")
            for line in lines:
                print(f"    {line}")


if __name__ == "__main__":
    main()
