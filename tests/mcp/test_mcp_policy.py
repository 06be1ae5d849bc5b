"""N-01: the policy file and its path expressions (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sagacity_agents.errors import DeclarationError
from sagacity_agents.core.undo import CompensationContext
from sagacity_agents.sdk.mcp import (
    McpPolicy,
    McpUndo,
    UndoArgumentsError,
    definition_digest,
)


def _ctx(args: dict, result: object) -> CompensationContext:
    return CompensationContext(saga_id="s", seq=3, tool="charge", call_id="c1", args={"arguments": args},
                               result=result, undo_data=None, idempotency_key="k")


@pytest.mark.case("N-01")
def test_undo_arguments_from_structured_content_and_args() -> None:
    undo = McpUndo("refund", {"charge_id": "$.result.charge_id", "who": "$.args.customer", "full": True})
    result = {"structured_content": {"charge_id": "ch_1"}, "output": "ignored"}
    assert undo.build(_ctx({"customer": "ann"}, result)) == {"charge_id": "ch_1", "who": "ann", "full": True}


@pytest.mark.case("N-01")
def test_undo_arguments_from_json_text_content_when_no_structured_content() -> None:
    undo = McpUndo("refund", {"charge_id": "$.result.items.0.id"})
    result = {"structured_content": None, "output": {"type": "text", "text": '{"items": [{"id": "ch_9"}]}'}}
    assert undo.build(_ctx({}, result)) == {"charge_id": "ch_9"}


@pytest.mark.case("N-01")
def test_result_with_neither_structured_nor_json_text_is_refused_not_guessed() -> None:
    undo = McpUndo("refund", {"charge_id": "$.result.charge_id"})
    with pytest.raises(UndoArgumentsError, match="neither structuredContent nor JSON text"):
        undo.build(_ctx({}, {"structured_content": None, "output": {"type": "text", "text": "charged ch_1"}}))
    with pytest.raises(UndoArgumentsError, match="no 'charge_id'"):
        undo.build(_ctx({}, {"structured_content": {"id": "x"}, "output": ""}))


@pytest.mark.case("N-01")
def test_undo_arguments_from_a_python_callable() -> None:
    undo = McpUndo("refund", lambda ctx: {"charge_id": ctx.result["structured_content"]["charge_id"],
                                          "key": ctx.idempotency_key})
    assert undo.build(_ctx({}, {"structured_content": {"charge_id": "c"}})) == {"charge_id": "c", "key": "k"}


@pytest.mark.case("N-01")
def test_policy_file_errors_name_the_tool(tmp_path: Path) -> None:
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"tools": {"charge": {"reversibility": "compensatable"}}}))
    with pytest.raises(DeclarationError, match="charge.*needs an undo"):
        McpPolicy.load(bad)
    bad.write_text(json.dumps({"tools": {"wire": {"reversibility": "sometimes"}}}))
    with pytest.raises(DeclarationError, match="wire"):
        McpPolicy.load(bad)
    bad.write_text("{not json")
    with pytest.raises(DeclarationError, match="p.json"):
        McpPolicy.load(bad)


@pytest.mark.case("N-01")
def test_a_pinned_definition_that_changed_is_undeclared() -> None:
    definition = {"server": "p", "name": "wire", "description": "Wire money.", "input_schema": {"type": "object"}}
    policy = McpPolicy.from_json({"tools": {"wire": {"reversibility": "irreversible",
                                                     "definition_sha256": definition_digest(definition)}}})
    assert policy.entry_for("wire", definition) is not None
    assert policy.entry_for("wire", {**definition, "description": "Wire money; memo forwarded."}) is None
    assert policy.entry_for("wire", {**definition, "server": "renamed"}) is not None  # the server name is not pinned


@pytest.mark.case("N-04")
def test_an_mcp_declaration_no_server_here_declares_fails_naming_the_server() -> None:
    from sagacity_agents.core.declarations import declaration_by_id
    from sagacity_agents.sdk.mcp import McpServerMissingError

    decl = declaration_by_id("mcp:ledger-x:charge#0123456789ab")
    assert decl is not None and decl.declaration_id is None  # answered, never registered
    with pytest.raises(McpServerMissingError, match="MCP server 'ledger-x' is not known"):
        decl.undo(_ctx({}, None))
    assert declaration_by_id("module:function") is None  # other ids: unchanged


@pytest.mark.case("N-01")
@pytest.mark.parametrize("path", ["$result.charge_id", "$.reslt.charge_id", "$args", "$.args..x"])
def test_malformed_undo_path_is_refused_when_the_policy_loads(path: str) -> None:
    policy = {"tools": {"charge": {"reversibility": "compensatable",
                                   "undo": {"tool": "refund", "arguments": {"charge_id": path}}}}}
    with pytest.raises(DeclarationError, match=r"policy tool 'charge'.*is not a path expression"):
        McpPolicy.from_json(policy)
    assert McpUndo("refund", {"note": "$5"}).arguments == {"note": "$5"}  # a literal stays one
