"""The wheel is complete: built from the package's sources, installed into a fresh virtual
environment, its own ``sagacity`` command migrates a PostgreSQL database and runs the demo.

The SQL the backends run is package data (SQLite's tables in ``backends/sqlite/sql/``, the
PostgreSQL migrations in ``backends/postgres/sql/``): a file the build leaves out passes every
other test, which imports the checkout, and breaks only an installed package. So:

* the wheel is built (``pip wheel --no-deps --no-build-isolation --check-build-dependencies``,
  the build requirements coming from the ``test`` extra: no download) from a copy of
  ``pyproject.toml``, ``README.md`` and ``sagacity_agents/`` alone, so that neither a stale
  ``build/`` directory of the checkout nor any other file there can stand in for a missing one;
  it must hold every ``.sql`` file of the sources, at the same place;
* it is installed with ``--no-deps --no-index`` into a fresh venv made without pip; that venv
  finds the dependencies in this environment's site-packages through a ``.pth`` path line, which
  adds the directory but runs none of the ``.pth`` files in it: the editable install of the
  checkout (a ``.pth`` hook there) stays out. The venv's ``python`` must import
  ``sagacity_agents`` from its own site-packages;
* the venv's ``sagacity db migrate`` migrates a fresh journal schema and a fresh checkpoint schema
  on the test server (``tests/pg.py``: skipped without it, failed under CI), dropped after, and
  the tables must be there;
* the venv's ``sagacity demo`` runs in an empty directory (SQLite, scripted model, no API key)
  and prints what the README says it prints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.pg import (
    SERVER,
    admin_connect,
    checkpoint_uri,
    drop_schema,
    new_schema,
    server_or_skip,
    with_search_path,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sagacity_agents"

pytestmark = pytest.mark.multiprocess


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what could point a child at the checkout (or start
    coverage in it) and without an OpenAI key, plus ``extra``."""
    env = {
        key: value for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "COLUMNS",
                       "OPENAI_API_KEY")
        and not key.startswith(("COV_CORE_", "VIRTUAL_ENV"))
    }
    return {**env, "PYTHONNOUSERSITE": "1", **extra}


def run(args: list[str | Path], cwd: Path, **extra: str) -> str:
    """Run ``args`` in ``cwd``; its output (stdout and stderr), asserted a success."""
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=clean_env(**extra), capture_output=True, text=True,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{output}"
    return output


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the package's sources."""
    src = tmp_path_factory.mktemp("src")
    shutil.copy2(ROOT / "pyproject.toml", src)
    shutil.copy2(ROOT / "README.md", src)
    shutil.copytree(PACKAGE, src / "sagacity_agents",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--check-build-dependencies", "--no-index", "-w", out, src], cwd=src)
    (built,) = out.glob("sagacity_agents-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; its dependencies are this environment's."""
    home = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", home], check=True, timeout=120)
    python = home / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         wheel], cwd=home)
    site_packages = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             cwd=home).strip())
    ours = {sysconfig.get_paths()[kind] for kind in ("purelib", "platlib")}
    (site_packages / "zz_dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return home


def test_the_wheel_holds_every_sql_file_of_the_sources(wheel):
    sources = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.sql"))
    assert any(s.startswith("sagacity_agents/backends/sqlite/sql/") for s in sources), sources
    assert any(s.startswith("sagacity_agents/backends/postgres/sql/") for s in sources), sources
    with zipfile.ZipFile(wheel) as archive:
        shipped = sorted(name for name in archive.namelist() if name.endswith(".sql"))
        assert shipped == sources
        for name in sources:
            assert archive.read(name) == (ROOT / name).read_bytes(), name


def test_the_venv_imports_the_installed_package_not_the_checkout(venv):
    where = run([venv / "bin" / "python", "-c",
                 "import sagacity_agents, sys; print(sagacity_agents.__file__); print(sys.prefix)"],
                cwd=venv).splitlines()
    module, prefix = Path(where[0]).resolve(), Path(where[1]).resolve()
    assert prefix == venv.resolve()
    assert module.is_relative_to(venv.resolve() / "lib"), module
    assert not module.is_relative_to(ROOT), module


def shipped_migrations(kind: str) -> str:
    """``1, 2, ...``: the versions of the migrations in the sources' ``postgres/sql/<kind>/``."""
    files = sorted((PACKAGE / "backends" / "postgres" / "sql" / kind).glob("*.sql"))
    assert files, kind
    return ", ".join(str(int(f.name.split("_", 1)[0])) for f in files)


def test_db_migrate_from_the_installed_package(venv):
    server_or_skip()
    journal_schema = new_schema("sagacity_wheel")
    checkpoint_schema = f"{journal_schema}_cp"
    try:
        output = run([venv / "bin" / "sagacity", "db", "migrate",
                      "--db", with_search_path(SERVER, journal_schema),
                      "--checkpoints", checkpoint_uri(checkpoint_schema)], cwd=venv)
        assert f"applied migration(s) {shipped_migrations('journal')}: schema is current" in output
        assert (f"checkpoint schema {checkpoint_schema} is current: applied migration(s) "
                f"{shipped_migrations('checkpoints')}") in output
        with admin_connect() as conn:
            tables = {
                row for row in conn.execute(
                    "SELECT table_schema, table_name FROM information_schema.tables "
                    "WHERE table_schema IN (%s, %s)", (journal_schema, checkpoint_schema),
                ).fetchall()
            }
        assert {(journal_schema, "sagacity_journal"), (journal_schema, "sagacity_approval_requests"),
                (checkpoint_schema, "sagacity_checkpoints")} <= tables, tables
    finally:
        drop_schema(checkpoint_schema)
        drop_schema(journal_schema)


def test_demo_from_the_installed_package(venv, tmp_path):
    output = run([venv / "bin" / "sagacity", "demo"], cwd=tmp_path)
    assert "Your trip is booked!" in output
    assert "COMPENSATED" in output
    assert output.index("1. book_hotel") < output.index("2. book_flight")
    assert "nothing booked, nothing charged" in output
    assert "verify: ok" in output
    assert "sagacity journal verify --db sagacity-demo.db" in output
    written = {p.name for p in tmp_path.iterdir()}
    assert {"sagacity-demo.db", "sagacity-demo.db.booking.db"} <= written, written
