"""Shell, apply-patch, computer and hosted tools at the saga's edge.

* :func:`protect_apply_patch`: an ``ApplyPatchTool`` whose editor journals each edit with the
  file's pre-image (INTENT, before the editor touches it) and the digest it left (EXECUTED);
  compensation restores the pre-image byte for byte, and refuses (COMPENSATION_FAILED, still
  dirty) when the file changed since the edit.
* :func:`protect_shell`: a local ``ShellTool`` is irreversible unless declared otherwise: the copy
  pauses through the SDK's ``needs_approval=True``, and the approval is bound to its
  ``commands`` and the working directory the application names (the call itself carries none);
  its executor runs only on a consumed approval of exactly those (``Saga.run_call``).
* ``LocalShellTool`` and ``ComputerTool`` have no approval seam (only an executor / a
  ``Computer`` and a safety-check callback): they are **outside the saga**. So are the hosted
  tools (a ``ShellTool`` with a hosted environment, web and file search, code interpreter,
  image generation, tool search, hosted MCP), which act on OpenAI's side before anything of ours
  could be journaled. :func:`outside_the_saga` lists them; ``bind_agent`` warns with that list at
  start-up (:class:`OutsideSagaWarning`) and, under ``strict``, refuses a ``HostedMCPTool`` whose
  server never requires approval (docs/architecture.md, "Tools outside the saga").
"""

from __future__ import annotations

import base64
import copy
import hashlib
import inspect
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    ApplyPatchTool,
    ComputerTool,
    HostedMCPTool,
    LocalShellTool,
    ShellTool,
)

from ..core.declarations import Reversibility, ToolDeclaration
from ..core.saga import current_saga, record_undo_data
from ..core.undo import CompensationContext

__all__ = [
    "APPLY_PATCH_DECLARATION",
    "OutsideSagaWarning",
    "outside_the_saga",
    "protect_apply_patch",
    "protect_shell",
    "shell_approval_subject",
]

SHELL_CWD_ATTR = "_sagacity_shell_cwd"


class OutsideSagaWarning(UserWarning):
    """Tools of the agent graph whose effects no saga can journal or undo (listed)."""


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _image(path: Path) -> str | None:
    return base64.b64encode(path.read_bytes()).decode("ascii") if path.is_file() else None


def _restore_pre_image(ctx: CompensationContext) -> None:
    """Undo an edit: put every touched file back as it was, refusing when one changed since."""
    before: dict[str, str | None] = (ctx.args or {}).get("pre_images") or {}
    after: dict[str, str | None] = (ctx.undo_data or {}).get("post_sha256") or {}
    untouched: list[str] = (ctx.undo_data or {}).get("untouched_under_root") or []
    if untouched:
        raise RuntimeError(
            "not restored: the editor reported success but left " + ", ".join(untouched) + " as "
            "it was (it writes outside protect_apply_patch's root): its edit is somewhere this "
            "undo cannot see; still dirty: find and restore it by hand, and give root= the "
            "directory the editor writes in")
    changed = [p for p, digest in after.items() if _digest(Path(p)) != digest]
    if changed:
        raise RuntimeError(
            "not restored: " + ", ".join(changed) + " changed since the edit (its SHA-256 is not "
            "the one the edit left); left as it is, still dirty: restore it by hand")
    for name, image in before.items():
        path = Path(name)
        if image is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(image))


APPLY_PATCH_DECLARATION = ToolDeclaration(
    name="apply_patch", reversibility=Reversibility.COMPENSATABLE, undo=_restore_pre_image,
    classify=lambda result: "failed" if getattr(result, "status", None) == "failed" else None,
    declaration_id="sagacity:apply_patch#restore-pre-image")
"""The declaration of every protected apply-patch edit: compensatable, undone by restoring the
journaled pre-images (the id is the same in every process, for recovery)."""


def _untouched(method: str, paths: list[Path], before: dict[str, str | None],
               after: dict[str, str | None]) -> list[str]:
    """The files under the root that a successful ``method`` should have changed and did not
    (the editor writes somewhere else than the root given to ``protect_apply_patch``)."""
    path = str(paths[0])
    pre = before.get(path)
    pre_digest = hashlib.sha256(base64.b64decode(pre)).hexdigest() if pre is not None else None
    if method == "create_file" and after[path] is None:
        return [path]
    if method == "delete_file" and after[path] is not None:
        return [path]
    if method == "update_file" and len(paths) == 1 and after[path] == pre_digest:
        return [path]  # an update that moved nothing and changed no byte under the root
    if method == "update_file" and len(paths) == 2 and after[str(paths[1])] is None:
        return [str(paths[1])]  # a move whose destination does not exist under the root
    return []


class _SagaEditor:
    """The user's editor, each operation journaled around it inside a saga."""

    def __init__(self, inner: Any, root: Path, tool_name: str) -> None:
        self.inner = inner
        self.root = root
        self.tool_name = tool_name

    async def _run(self, method: str, operation: Any) -> Any:
        async def body() -> Any:
            result = getattr(self.inner, method)(operation)
            if inspect.isawaitable(result):
                result = await result
            after = {str(p): _digest(p) for p in paths}
            data: dict[str, Any] = {"post_sha256": after}
            if getattr(result, "status", None) != "failed":
                untouched = _untouched(method, paths, args["pre_images"], after)
                if untouched:  # the editor wrote elsewhere: undo must not claim a restore
                    data["untouched_under_root"] = untouched
            record_undo_data(data)
            return result

        saga = current_saga.get()
        if saga is None or saga.closed:
            return await body()
        paths = [self.root / operation.path] + ([self.root / operation.move_to] if operation.move_to else [])
        args = {"operation": operation.type, "path": operation.path, "move_to": operation.move_to,
                "diff": operation.diff, "pre_images": {str(p): _image(p) for p in paths}}
        return await saga.run_call(APPLY_PATCH_DECLARATION, self.tool_name, None, args, body)

    async def create_file(self, operation: Any) -> Any:
        """The user's ``create_file``, journaled."""
        return await self._run("create_file", operation)

    async def update_file(self, operation: Any) -> Any:
        """The user's ``update_file``, journaled."""
        return await self._run("update_file", operation)

    async def delete_file(self, operation: Any) -> Any:
        """The user's ``delete_file``, journaled."""
        return await self._run("delete_file", operation)


def protect_apply_patch(tool: ApplyPatchTool, *, root: str | Path) -> ApplyPatchTool:
    """Return a copy of ``tool`` whose edits are journaled and undone by restoring the file.

    Args:
        tool: the SDK's ``ApplyPatchTool`` (left unchanged).
        root: the directory the model's paths are relative to: the one the editor writes in
            (required: a default such as the current directory silently points elsewhere when
            the editor has its own root, and the undo would restore the wrong files). An edit
            the editor reports done that left its file under ``root`` as it was (not created,
            not deleted, not a byte changed) is journaled so; its undo then fails (still
            dirty) instead of claiming a restore.

    Returns:
        A copy with the editor wrapped. Inside a saga each operation journals an INTENT holding
        the pre-image of every file it touches (base64, ``None`` when absent) before the editor
        runs, and its EXECUTED the SHA-256 it left; a result whose ``status`` is ``"failed"`` is
        FAILED. Compensation writes the pre-images back (deletes a created file), refusing when a
        file's digest is no longer the one the edit left (COMPENSATION_FAILED: still dirty).

    Raises:
        TypeError: ``tool`` is not an ``ApplyPatchTool``.
    """
    if not isinstance(tool, ApplyPatchTool):
        raise TypeError(f"protect_apply_patch takes an ApplyPatchTool, got {tool!r}")
    protected = copy.copy(tool)
    protected.editor = _SagaEditor(tool.editor, Path(root).resolve(), tool.name)
    return protected


def protect_shell(tool: ShellTool, *, working_directory: str, reversibility: Reversibility | str =
                  Reversibility.IRREVERSIBLE) -> ShellTool:
    """Return a copy of a local ``ShellTool`` whose commands are journaled and, when
    irreversible (the default), each wait for a human approval of their exact text.

    Args:
        tool: the SDK's local ``ShellTool`` (left unchanged).
        working_directory: where its executor runs the commands (the call carries none): journaled
            and part of what the approval is bound to.
        reversibility: ``irreversible`` (default), ``no_undo`` or ``read_only`` (no undo can be
            declared for a shell command).

    Returns:
        The copy, with ``needs_approval=True`` when irreversible and its executor journaled
        (INTENT ``{"commands", "working_directory"}``; the executor runs only on a consumed
        approval of those, checked by ``Saga.run_call``).

    Raises:
        TypeError: not a ``ShellTool`` with a local executor.
        ValueError: ``compensatable``, or an unknown reversibility.
    """
    if not isinstance(tool, ShellTool) or tool.executor is None:
        raise TypeError(f"protect_shell takes a local ShellTool (with an executor), got {tool!r}")
    kind = Reversibility(reversibility)
    if kind is Reversibility.COMPENSATABLE:
        raise ValueError("a shell command has no declared undo: use irreversible, no_undo or read_only")
    decl = ToolDeclaration(name=tool.name, reversibility=kind,
                           declaration_id=f"sagacity:shell:{tool.name}:{kind.value}")
    inner = tool.executor

    async def journaled(request: Any) -> Any:
        async def body() -> Any:
            result = inner(request)
            return await result if inspect.isawaitable(result) else result

        saga = current_saga.get()
        if saga is None or saga.closed:
            return await body()
        args = {"commands": list(request.data.action.commands), "working_directory": working_directory}
        return await saga.run_call(decl, tool.name, request.data.call_id, args, body)

    protected = copy.copy(tool)
    protected.executor = journaled
    if kind is Reversibility.IRREVERSIBLE:
        protected.needs_approval = True
    setattr(protected, SHELL_CWD_ATTR, working_directory)
    return protected


def shell_approval_subject(item: Any) -> dict[str, Any] | None:
    """What an approval of the paused shell call ``item`` is bound to (its commands and the
    protected tool's working directory), or ``None`` when it is not a protected shell call."""
    raw: Any = getattr(item, "raw_item", None)
    kind = raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)
    if kind != "shell_call":
        return None
    for tool in getattr(getattr(item, "agent", None), "tools", None) or ():
        if isinstance(tool, ShellTool) and tool.name == item.tool_name and hasattr(tool, SHELL_CWD_ATTR):
            action: Any = raw.get("action") if isinstance(raw, dict) else raw.action
            commands: Any = action.get("commands") if isinstance(action, dict) else action.commands
            return {"commands": list(commands), "working_directory": getattr(tool, SHELL_CWD_ATTR)}
    return None


def outside_the_saga(agent: Agent[Any]) -> list[str]:
    """The tools of ``agent`` no saga can journal or undo, each with why (see the module doc)."""
    found: list[str] = []
    for tool in getattr(agent, "tools", None) or ():
        name = getattr(tool, "name", type(tool).__name__)
        if isinstance(tool, (LocalShellTool, ComputerTool)):
            found.append(f"{name} ({type(tool).__name__}: no approval seam, runs unjournaled)")
        elif isinstance(tool, ShellTool) and tool.executor is None:
            found.append(f"{name} (hosted shell: runs on OpenAI's side)")
        elif isinstance(tool, ShellTool) and not hasattr(tool, SHELL_CWD_ATTR):
            found.append(f"{name} (local ShellTool not protected: protect_shell(tool, working_directory=...))")
        elif isinstance(tool, ApplyPatchTool) and not isinstance(tool.editor, _SagaEditor):
            found.append(f"{name} (ApplyPatchTool not protected: protect_apply_patch(tool, root=DIR))")
        elif type(tool).__name__ in ("WebSearchTool", "FileSearchTool", "CodeInterpreterTool",
                                     "ImageGenerationTool", "ToolSearchTool", "HostedMCPTool"):
            found.append(f"{name} ({type(tool).__name__}: hosted, acts on OpenAI's side)")
    return found


def hosted_mcp_never_approved(agent: Agent[Any]) -> list[str]:
    """The ``HostedMCPTool`` servers of ``agent`` whose calls never wait for an approval
    (``require_approval`` absent or ``"never"``): refused under ``strict``."""
    found = []
    for tool in getattr(agent, "tools", None) or ():
        if isinstance(tool, HostedMCPTool):
            config = dict(tool.tool_config)
            if config.get("require_approval") in (None, "never"):
                found.append(str(config.get("server_label", "hosted_mcp")))
    return found
