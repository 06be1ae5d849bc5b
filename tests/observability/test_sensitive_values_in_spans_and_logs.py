"""Our spans (the ``saga.*`` spans in the SDK's trace, OpenTelemetry's), our log lines and the
failure texts we build carry a sensitive value only as its mask, whatever the run's
``trace_include_sensitive_data`` says: a card number and a CVV in the arguments, a token in a
result, a password quoted in an exception, with no declaration at all. And the start-up
warning: a tool with sensitive fields under a run config that lets the SDK trace tool inputs
(the SDK's own spans are outside our guarantee)."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
from agents import Agent, RunConfig, function_tool

from sagacity_agents import FailurePolicy, Sagacity, compensable, read_only
from sagacity_agents.errors import SensitiveTraceWarning
from sagacity_agents.sdk.trace_warning import sensitive_tool_fields, warn_if_sdk_traces_sensitive
from tests.sdk.helpers import agent, scripted

pytestmark = pytest.mark.case("X-03")

CARD = "4000 0000 0000 0002"
TOKEN = "tok_live_8f3kQ9zLm2"
PASSWORD = "correct-horse-battery"
SECRETS = (CARD, CARD.replace(" ", ""), TOKEN, PASSWORD)


def tools():
    @function_tool
    @compensable(undo=lambda ctx: None)
    def pay(card_number: str, cvv: str, amount: int) -> dict:
        """Charge a card."""
        return {"token": TOKEN, "ok": True}

    @function_tool
    @read_only
    def login(user: str, password: str) -> str:
        """Log in."""
        raise ValueError(f"bad password {password!r} for {user}")

    return pay, login


def model():
    return scripted([("pay", {"card_number": CARD, "cvv": "737", "amount": 5}, "c1")],
                    [("login", {"user": "ann", "password": PASSWORD}, "c2")], "done")


async def run(tmp_path, run_config):
    sagacity = Sagacity(str(tmp_path / "j.db"), policy=FailurePolicy.CONTINUE)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SensitiveTraceWarning)
            return await sagacity.run(agent(model(), *tools()), "go", run_config=run_config)
    finally:
        await sagacity.aclose()


def assert_clean(text: str) -> None:
    for value in SECRETS:
        assert value not in text, value


@pytest.mark.parametrize("include", [True, False], ids=["sensitive-on", "sensitive-off"])
async def test_no_value_in_our_spans_logs_or_failure_texts(tmp_path, sdk_spans, otel, caplog, include):
    caplog.set_level(logging.DEBUG)
    result = await run(tmp_path, RunConfig(trace_include_sensitive_data=include))
    ours = sdk_spans.ours()
    assert {s.span_data.name for s in ours} >= {"saga.call pay", "saga.call login", "saga.run"}
    assert_clean(json.dumps([s.export() for s in ours], default=str))
    exporter = otel[0]
    assert_clean(json.dumps([json.loads(s.to_json()) for s in exporter.get_finished_spans()]))
    assert_clean(caplog.text + "".join(str(r.args) for r in caplog.records))
    assert result.failures
    login = sdk_spans.one("saga.call login")
    assert login.error is not None and PASSWORD not in login.error["message"]
    if include:  # arguments there, as masks
        data = sdk_spans.one("saga.call pay").span_data.data
        assert data["sagacity.call.args"]["card_number"] == "**** **** **** 0002"
        assert data["sagacity.call.args"]["cvv"] == "****"
        assert data["sagacity.call.result"]["token"] == "****"
        assert "bad password '****'" in login.error["message"]


async def test_failure_texts_mask_a_password_the_exception_quotes(tmp_path):
    """What the saga reports of a failure (``SagaResult.failures``, the closing reason, the
    STOP message) masks the values its secrets met (``SagaCore.note_failure``)."""
    pytest.importorskip("sagacity_agents.core.protection")  # the saga's secrets on the call path
    result = await run(tmp_path, RunConfig(tracing_disabled=True))
    (failure,) = result.failures
    assert PASSWORD not in failure.error and "bad password '****'" in failure.error


def test_the_tools_with_sensitive_fields_are_found():
    pay, login = tools()

    @function_tool
    @read_only
    def lookup(city: str) -> str:
        """Look up."""
        return city

    found = sensitive_tool_fields(Agent(name="a", tools=[pay, login, lookup]))
    assert found == {"a: pay": ["card_number", "cvv"], "a: login": ["password"]}


@pytest.mark.parametrize("config, warns", [
    (RunConfig(trace_include_sensitive_data=True), True),
    ({"trace_include_sensitive_data": True}, True),
    (RunConfig(trace_include_sensitive_data=True, tracing_disabled=True), False),
    (RunConfig(trace_include_sensitive_data=False), False),
], ids=["on", "dict", "tracing-off", "sensitive-off"])
def test_the_warning_fires_only_when_the_sdk_would_trace_tool_inputs(config, warns, monkeypatch):
    monkeypatch.delenv("OPENAI_AGENTS_DISABLE_TRACING", raising=False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warn_if_sdk_traces_sensitive(Agent(name="a", tools=list(tools())), config)
    found = [w for w in seen if issubclass(w.category, SensitiveTraceWarning)]
    assert bool(found) is warns
    if warns:
        assert "pay (card_number, cvv)" in str(found[0].message) and "trace_include_sensitive_data" in str(found[0].message)


def test_the_warning_is_silent_for_tools_without_sensitive_fields(monkeypatch):
    monkeypatch.delenv("OPENAI_AGENTS_DISABLE_TRACING", raising=False)

    @function_tool
    @read_only
    def lookup(city: str) -> str:
        """Look up."""
        return city

    with warnings.catch_warnings():
        warnings.simplefilter("error", SensitiveTraceWarning)
        warn_if_sdk_traces_sensitive(Agent(name="a", tools=[lookup]), RunConfig())


async def test_sagacity_run_warns_at_start_up(tmp_path, sdk_spans):
    sagacity = Sagacity(str(tmp_path / "j.db"), policy=FailurePolicy.CONTINUE)
    try:
        with pytest.warns(SensitiveTraceWarning, match="card_number"):
            await sagacity.run(agent(model(), *tools()), "go", run_config=RunConfig(trace_include_sensitive_data=True))
        with warnings.catch_warnings():
            warnings.simplefilter("error", SensitiveTraceWarning)
            await sagacity.run(agent(model(), *tools()), "go", run_config=RunConfig(tracing_disabled=True))
    finally:
        await sagacity.aclose()
