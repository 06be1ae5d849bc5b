"""N-05: apply-patch edits journaled with the pre-image and undone byte for byte (refused when the
file changed since); a local shell command paused and bound to its text and working directory;
tools outside the saga listed at start-up; a hosted MCP server that never asks refused under strict."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    ApplyPatchTool,
    HostedMCPTool,
    ShellTool,
    WebSearchTool,
    function_tool,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses.response_apply_patch_tool_call import (
    OperationCreateFile,
    OperationUpdateFile,
    ResponseApplyPatchToolCall,
)
from openai.types.responses.response_function_shell_tool_call import (
    Action,
    ResponseFunctionShellToolCall,
)

from sagacity_agents import Sagacity, SagaStatus, no_undo
from sagacity_agents.backends import Phase
from sagacity_agents.errors import ConfigurationError
from sagacity_agents.sdk.local_tools import (
    OutsideSagaWarning,
    protect_apply_patch,
    protect_shell,
)

pytestmark = pytest.mark.case("N-05")

ORIGINAL = b"line one\r\nline two\x00\xff\n"  # CRLF, NUL and a non-UTF-8 byte: byte for byte


class WholeFileEditor:
    """A toy editor: the "diff" is the file's new content."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def create_file(self, op: Any) -> str:
        (self.root / op.path).write_text(op.diff)
        return "created"

    def update_file(self, op: Any) -> str:
        (self.root / op.path).write_text(op.diff)
        return "updated"

    def delete_file(self, op: Any) -> str:
        (self.root / op.path).unlink()
        return "deleted"


@function_tool
@no_undo
def notify(text: str) -> str:
    """Notify the reviewers (fails: the mail server is down)."""
    raise RuntimeError("mail server down")


def _patch(call_id: str, op: Any) -> ResponseApplyPatchToolCall:
    return ResponseApplyPatchToolCall(id=f"id-{call_id}", call_id=call_id, operation=op,
                                      status="completed", type="apply_patch_call")


def _patch_model() -> ScriptedModel:
    model = ScriptedModel()
    model.enqueue([_patch("p1", OperationUpdateFile(path="a.txt", diff="rewritten\n", type="update_file")),
                   _patch("p2", OperationCreateFile(path="new.txt", diff="fresh\n", type="create_file"))])
    model.enqueue([function_call("notify", '{"text": "patched"}', call_id="n1")])
    model.enqueue([assistant_message("done")])
    return model


async def test_apply_patch_edit_undone_byte_for_byte(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(ORIGINAL)
    tool = protect_apply_patch(ApplyPatchTool(editor=WholeFileEditor(tmp_path)), root=tmp_path)
    sagacity = Sagacity(tmp_path / "j.db")
    result = await sagacity.run(Agent(name="dev", model=_patch_model(), tools=[tool, notify]), "edit")
    entries = await sagacity.journal.entries(result.saga_id)
    await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATED
    assert (tmp_path / "a.txt").read_bytes() == ORIGINAL
    assert not (tmp_path / "new.txt").exists()  # created by the saga: removed
    assert sum(e.phase is Phase.COMPENSATED for e in entries) == 2


async def test_apply_patch_undo_refused_when_the_file_changed_since(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(ORIGINAL)

    class TouchyEditor(WholeFileEditor):
        def create_file(self, op: Any) -> str:  # a later edit by someone else, before the undo
            (self.root / "a.txt").write_text("edited by a human\n")
            return super().create_file(op)

    tool = protect_apply_patch(ApplyPatchTool(editor=TouchyEditor(tmp_path)), root=tmp_path)
    sagacity = Sagacity(tmp_path / "j.db")
    result = await sagacity.run(Agent(name="dev", model=_patch_model(), tools=[tool, notify]), "edit")
    await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert (tmp_path / "a.txt").read_text() == "edited by a human\n"  # left alone
    (failed,) = result.report.failed
    assert "changed since the edit" in failed.detail


async def test_shell_command_paused_and_bound_to_its_text(tmp_path: Path) -> None:
    ran: list[list[str]] = []

    def executor(request: Any) -> str:
        ran.append(list(request.data.action.commands))
        return "ok"

    shell = protect_shell(ShellTool(executor=executor), working_directory=str(tmp_path))
    model = ScriptedModel()
    model.enqueue([ResponseFunctionShellToolCall(id="s", call_id="s1", action=Action(commands=["rm -rf build"]),
                                                 status="completed", type="shell_call")])
    sagacity = Sagacity(tmp_path / "j.db")
    result = await sagacity.run(Agent(name="ops", model=model, tools=[shell]), "clean")
    assert result.status is SagaStatus.AWAITING_APPROVAL
    assert ran == []
    (request,) = result.approvals
    assert request.args == {"commands": ["rm -rf build"], "working_directory": str(tmp_path)}
    await sagacity.approve(request.request_id, approver="ops@example.com")
    model.enqueue([assistant_message("cleaned")])
    resumed = await sagacity.resume(result.saga_id, Agent(name="ops", model=model, tools=[shell]))
    entries = await sagacity.journal.entries(result.saga_id)
    await sagacity.aclose()
    assert resumed.status is SagaStatus.COMPLETED
    assert ran == [["rm -rf build"]]
    intent = next(e for e in entries if e.phase is Phase.INTENT)
    assert intent.payload["request_id"] == request.request_id


def test_tools_outside_the_saga_listed_and_hosted_mcp_refused_under_strict(tmp_path: Path) -> None:
    hosted = HostedMCPTool(tool_config={"type": "mcp", "server_label": "github",
                                        "server_url": "https://example.invalid/mcp",
                                        "require_approval": "never"})
    agent = Agent(name="a", model=ScriptedModel(), tools=[WebSearchTool(), hosted])
    from sagacity_agents.backends import InMemoryJournal
    from sagacity_agents.core.saga import Saga
    from sagacity_agents.sdk.binding import bind_agent

    saga = Saga(InMemoryJournal())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bind_agent(saga, agent)
    (warning,) = [w for w in caught if issubclass(w.category, OutsideSagaWarning)]
    assert "web_search" in str(warning.message) and "hosted_mcp" in str(warning.message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OutsideSagaWarning)
        with pytest.raises(ConfigurationError, match="github.*never require approval"):
            bind_agent(saga, agent, strict=True)


async def test_apply_patch_undo_never_claims_a_restore_when_the_editor_wrote_outside_root(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        protect_apply_patch(ApplyPatchTool(editor=WholeFileEditor(tmp_path)))  # type: ignore[call-arg]
    elsewhere, root = tmp_path / "editor", tmp_path / "given"
    elsewhere.mkdir(), root.mkdir()
    (elsewhere / "a.txt").write_bytes(ORIGINAL)
    (root / "a.txt").write_bytes(ORIGINAL)
    model = ScriptedModel()
    model.enqueue([_patch("p1", OperationUpdateFile(path="a.txt", diff="rewritten\n", type="update_file"))])
    model.enqueue([function_call("notify", '{"text": "patched"}', call_id="n1")])
    model.enqueue([assistant_message("done")])
    tool = protect_apply_patch(ApplyPatchTool(editor=WholeFileEditor(elsewhere)), root=root)
    sagacity = Sagacity(tmp_path / "j.db")
    result = await sagacity.run(Agent(name="dev", model=model, tools=[tool, notify]), "edit")
    await sagacity.aclose()
    assert (elsewhere / "a.txt").read_text() == "rewritten\n"  # the real edit, not restored
    assert result.status is SagaStatus.COMPENSATION_FAILED and result.report.undone == ()
    (failed,) = result.report.failed
    assert "writes outside protect_apply_patch's root" in failed.detail
