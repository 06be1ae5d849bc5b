"""The demo's journal no longer holds its card number: ``sagacity demo`` in an empty directory
leaves no ``4000 0000 0000 0002`` (with or without its spaces) in any file it wrote (the journal,
its -wal, the booking system's file), and its own output shows the card masked. The card is in
the ``charge_card`` arguments (committed by default: a ``card_number`` field and a Luhn-valid
number) and in the user prompt (which reaches only the scripted model)."""

from __future__ import annotations

import warnings

import pytest
from click.testing import CliRunner

from sagacity_agents.cli import cli
from sagacity_agents.demo.trip import CARD
from sagacity_agents.errors import SensitiveTraceWarning

FORMS = (CARD.encode(), CARD.replace(" ", "").encode())


@pytest.mark.case("X-02")
def test_the_demo_stores_and_prints_no_card_number(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SAGACITY_DB", raising=False)
    monkeypatch.delenv("SAGACITY_DATA_KEY", raising=False)  # the demo's case: no master key
    monkeypatch.setenv("COLUMNS", "200")
    with warnings.catch_warnings():
        # The demo keeps the card out of the SDK's own spans too: no SensitiveTraceWarning.
        warnings.simplefilter("error", SensitiveTraceWarning)
        done = CliRunner().invoke(cli, ["demo"])
    assert done.exit_code == 0, done.output
    written = sorted(p for p in tmp_path.iterdir() if p.is_file())
    assert "sagacity-demo.db" in [p.name for p in written]
    for path in written:
        data = path.read_bytes()
        assert not [form for form in FORMS if form in data], path.name
    assert not [form for form in FORMS if form in done.output.encode()]
    assert "**** **** **** 0002" in done.output  # the request, as printed
    assert "verify: ok" in done.output
