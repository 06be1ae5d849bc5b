"""``protect_mcp_server``: every tool call of a local MCP server journaled in the saga.

The tools of an ``mcp_servers=`` server become ``FunctionTool`` objects only at run time, after
``list_tools`` (sdk-notes.md, "MCP"): nothing of ours can decorate them. The SDK gives a local
server (``MCPServerStdio``, ``MCPServerSse``, ``MCPServerStreamableHttp``) five seams, applied to
every tool it lists, and this module uses each for what only it sees (order pinned by
``tests/mcp/test_mcp_contract.py``; one ``ToolContext`` object per call goes through all of
them):

1. ``tool_input_guardrails``, ours **last** (a call the application's own guardrail rejects never
   reaches ours): journals the INTENT (raw arguments, the declaration the policy gives the tool as
   listed now, or ``undeclared``), refuses an unnamed tool under ``enforce`` (or ``strict``),
   checks an irreversible call's consumed approval against its arguments **and** the tool's
   definition, and hands the call's idempotency key to step 3 by the ``ToolContext`` object;
2. ``require_approval``: an irreversible tool always pauses (the user's own policy still asks
   for the others);
3. ``tool_meta_resolver``: puts the key in ``_meta`` (``sagacity/idempotency_key``), after the
   user's own ``_meta``;
4. ``custom_data_extractor``, the only seam that sees ``isError`` and ``structuredContent``:
   journals EXECUTED with ``{"structured_content", "output", "is_error": false}`` or FAILED for
   ``isError`` (the SDK hands such a result to the model as text); then the user's extractor;
5. ``tool_output_guardrails``, ours **first**: a call the extractor never saw raised (an MCP
   error, a lost connection, a dead server, a timeout): no outcome is written, its INTENT is
   left in doubt (it may have acted) and the saga fails, so the run ends IN_DOUBT.

The undo of a compensatable tool is another call on the server that made the call while it is
connected, else on the one registered under its name (``registry.protection_named``), with arguments from the policy (``policy.McpUndo``) and the undo
key in ``_meta``; it fails (COMPENSATION_FAILED) on ``isError``.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolOutputGuardrailData,
    tool_input_guardrail,
    tool_output_guardrail,
)

from ...core.canonical import canonical_bytes, sha256_hex
from ...core.checks import CheckContext, CheckResult
from ...core.declarations import Reversibility, ToolDeclaration
from ...core.saga import Saga, current_saga
from ...core.saga.payloads import raw_args_value
from ...core.sensitive import Sensitivity
from ...core.undo import CompensationContext
from ...errors import ApprovalError, ConfigurationError, DeclarationError
from .. import _sdk_internals as sdk
from ..nested import strict_scope
from ..user_errors import as_user_error
from . import registry
from .approval import describe_change
from .policy import (
    McpCheck, McpPolicy, McpToolPolicy, McpUndo, definition_digest, result_document, skeleton,
    tool_definition,
)

__all__ = ["IDEMPOTENCY_META_KEY", "McpCallFailed", "McpProtection", "protect_mcp_server"]

IDEMPOTENCY_META_KEY = "sagacity/idempotency_key"
"""The ``_meta`` key that carries a call's (or an undo's) idempotency key to the server."""

MODES = ("enforce", "observe")


class McpCallFailed(Exception):
    """An MCP call returned ``isError`` (journaled FAILED), or an undo call did."""


@dataclass
class _Call:
    """A call between its INTENT and its outcome, found by its ``ToolContext`` object."""

    saga: Saga
    call_id: str | None
    tool: str
    key: str
    decl: ToolDeclaration | None


def _text_of(output: Any) -> str:
    if isinstance(output, Mapping):
        return str(output.get("text", ""))
    if isinstance(output, list):
        return " ".join(_text_of(item) for item in output)
    return str(output)


async def _maybe_await(value: Any) -> Any:
    if hasattr(value, "__await__"):
        return await value
    return value


class McpProtection:
    """What ``protect_mcp_server`` did to one server (see the module doc); returned so the
    application can write the ``observe`` skeleton and read the definitions seen.

    Attributes:
        server: the ``agents.mcp`` server. server_name: its name (what the journal names).
        policy: the :class:`~.policy.McpPolicy`. mode: ``"enforce"`` or ``"observe"``.
        declarations: tool name -> ``ToolDeclaration`` (id ``mcp:SERVER:TOOL#DIGEST``).
        seen: tool name -> calls journaled through this protection in this process.
        made: ``(saga_id, call_id)`` of every call journaled through it (its undo comes back here).
    """

    def __init__(self, server: Any, policy: McpPolicy, mode: str, skeleton_path: Path | None) -> None:
        self.server = server
        self.server_name: str = server.name
        self.policy = policy
        self.mode = mode
        self.skeleton_path = skeleton_path
        self.seen: Counter[str] = Counter()
        self.made: set[tuple[str, str | None]] = set()
        self._undos_listed = False
        self._undo_seen: dict[str, dict[str, Any]] = {}
        """Undo tool -> its definition as first listed in this process (before any call)."""
        self._calls: weakref.WeakKeyDictionary[Any, _Call] = weakref.WeakKeyDictionary()
        self.declarations: dict[str, ToolDeclaration] = {}
        for name, entry in policy.tools.items():
            try:
                self.declarations[name] = ToolDeclaration(
                    name=f"{self.server_name}.{name}", reversibility=entry.reversibility,
                    undo=self._undo(entry.undo) if entry.undo is not None else None,
                    declaration_id=_declaration_id(self.server_name, name, entry),
                    deadline=entry.deadline, check=self._check(name, entry.check),
                    undo_needs=entry.undo.result_keys() if entry.undo is not None else (),
                    sensitivity=cast(Sensitivity, entry.sensitive))  # built by the policy
            except DeclarationError as exc:
                raise as_user_error(exc) from None

    # --- definitions ----------------------------------------------------------------------
    async def definitions(self, *, fresh: bool = False) -> dict[str, dict[str, Any]]:
        """The server's tools as it lists them (``list_tools``): name -> ``tool_definition``,
        plus ``read_only_hint`` (its annotations), which no digest covers.

        Args:
            fresh: list them from the server even when it was built with
                ``cache_tools_list=True`` (its cache is invalidated first, so the SDK's next
                listing is fresh too). Every check that guards against a changed definition
                (an approval's subject, an irreversible or pinned tool's INTENT) asks for it:
                a cached listing would hide a rug pull.

        Raises:
            Exception: whatever the server's ``list_tools`` raises (not connected...).
        """
        invalidate = getattr(self.server, "invalidate_tools_cache", None)
        if fresh and getattr(self.server, "cache_tools_list", False) and callable(invalidate):
            invalidate()
        found: dict[str, dict[str, Any]] = {}
        for tool in await self.server.list_tools():
            definition = tool_definition(tool, self.server_name)
            annotations = getattr(tool, "annotations", None)
            if getattr(annotations, "readOnlyHint", None) or getattr(annotations, "read_only_hint", None):
                definition = {**definition, "read_only_hint": True}
            found[tool.name] = definition
        return found

    async def definition_of(self, name: str, *, fresh: bool = False) -> dict[str, Any] | None:
        """The listed definition of ``name`` (without the hint), or ``None`` when not listed
        (``fresh``: as :meth:`definitions`)."""
        found = (await self.definitions(fresh=fresh)).get(name)
        if found is None:
            return None
        return {k: v for k, v in found.items() if k != "read_only_hint"}

    def own_name(self, public: str, names: Any = None) -> str:
        """The server's own name of the tool the run calls ``public``: ``public`` itself, or,
        when the agent prefixes MCP tool names (``mcp_config={"include_server_in_tool_names":
        True}``), the name among ``names`` (default: the policy's) that the SDK prefixes to
        ``public``; ``public`` when none does."""
        candidates = self.policy.tools if names is None else names
        if public in candidates:
            return public
        for name in candidates:
            if public in sdk.mcp_prefixed_tool_names(self.server_name, name):
                return name
        return public

    async def missing_undo_tools(self) -> list[str]:
        """The undo tools the policy names that the server does not list (checked until the
        server first lists them all, then never again: a server may drop tools later, which the
        undo then reports). Each entry reads ``"refund (undo of charge)"``.

        Raises:
            Exception: whatever the server's ``list_tools`` raises.
        """
        if self._undos_listed:
            return []
        listed = await self.definitions()
        missing = sorted(f"{e.undo.tool} (undo of {n})" for n, e in self.policy.tools.items()
                         if e.undo is not None and e.undo.tool not in listed)
        for entry in self.policy.tools.values():
            if entry.undo is not None and entry.undo.tool in listed:
                self._undo_seen.setdefault(entry.undo.tool, {
                    k: v for k, v in listed[entry.undo.tool].items() if k != "read_only_hint"})
        self._undos_listed = not missing
        return missing

    async def undo_refusal(self, tool: str) -> str | None:
        """Why the undo call of ``tool`` must not be sent, or ``None``: its definition, listed
        fresh now, no longer hashes to the ``definition_sha256`` the policy pins for ``tool``, or
        differs from the one this protection listed before the forward calls ran (a server that
        turned ``refund`` into a payout after the charge); or the server no longer lists it.
        An undo tool neither pinned nor seen before here (another process) is not checked.

        Raises:
            Exception: whatever the server's ``list_tools`` raises (the undo then fails too).
        """
        entry = self.policy.tools.get(tool)
        pin = entry.definition_sha256 if entry is not None else None
        seen = self._undo_seen.get(tool)
        if pin is None and seen is None:
            return None
        current = await self.definition_of(tool, fresh=True)
        where = f"undo tool {tool!r} of MCP server {self.server_name!r}"
        if current is None:
            return f"{where} is no longer listed by the server; the undo was not sent"
        changes = []
        if pin is not None and definition_digest(current) != pin:
            changes.append(f"its definition hashes to {definition_digest(current)[:12]}..., the "
                           f"policy pins {pin[:12]}...")
        if seen is not None and seen != current:
            changes.append(describe_change(seen, current))
        if not changes:
            return None
        return (f"{where} changed (" + "; ".join(changes) + f"); it is now described as "
                f"{current.get('description')!r} with parameters "
                f"{sorted((current.get('input_schema') or {}).get('properties', {}) or {})}: the undo "
                "was not sent (it may no longer undo the call); review the server, then update "
                "the policy's pin and recover")

    def guards_definition(self, name: str) -> bool:
        """Whether a call of ``name`` is checked against the tool's definition (irreversible:
        its approval is bound to it; or pinned by ``definition_sha256``), so it is listed fresh."""
        entry = self.policy.tools.get(name)
        return entry is not None and (entry.reversibility is Reversibility.IRREVERSIBLE
                                      or entry.definition_sha256 is not None)

    def declaration_for(self, name: str, definition: Mapping[str, Any] | None) -> ToolDeclaration | None:
        """The declaration of ``name`` as listed now; ``None``: undeclared (not named, pinned to
        another definition, or ``observe`` mode)."""
        if self.mode == "observe" or self.policy.entry_for(name, definition) is None:
            return None
        return self.declarations.get(name)

    async def write_skeleton(self, path: str | Path | None = None) -> Path:
        """Write the policy skeleton (``policy.skeleton``) of what the server lists and what
        ``observe`` saw, as indented JSON, for a human to review and pass to ``enforce``.

        Args:
            path: where (default: the ``skeleton=`` given to ``protect_mcp_server``).

        Raises:
            ConfigurationError: no path. OSError: it cannot be written.
        """
        target = Path(path) if path is not None else self.skeleton_path
        if target is None:
            raise ConfigurationError("write_skeleton needs a path (or protect_mcp_server(..., skeleton=PATH))")
        body = skeleton(self.server_name, await self.definitions(), self.seen, self.policy)
        target.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return target

    # --- the undo -------------------------------------------------------------------------
    def _undo(self, undo: McpUndo) -> Any:
        server_name = self.server_name

        async def undo_through_server(ctx: CompensationContext) -> None:
            # The server that made the call, while it is connected; else the one registered
            # under its name now (resume, recovery).
            protection = registry.protection_that_made(server_name, ctx.saga_id, ctx.call_id) \
                or registry.protection_named(server_name, needed_for=f"undo of {ctx.tool}")
            forward = dict(ctx.args or {})
            if not forward and ctx.raw_args:
                forward = {"arguments": raw_args_value(ctx.raw_args)}
            arguments = undo.build(_WithArguments(ctx, forward))
            refused = await protection.undo_refusal(undo.tool)
            if refused is not None:  # pinned like a forward call: a changed tool is not called
                raise McpCallFailed(refused)
            result = await protection.server.call_tool(
                undo.tool, arguments, meta={IDEMPOTENCY_META_KEY: ctx.idempotency_key})
            if getattr(result, "isError", False) or getattr(result, "is_error", False):
                texts = [getattr(item, "text", "") for item in getattr(result, "content", [])]
                raise McpCallFailed(f"undo {undo.tool}({json.dumps(arguments)}) on MCP server "
                                    f"{server_name!r} returned isError: {' '.join(texts)[:500]}")

        undo_through_server.__qualname__ = f"mcp_undo[{server_name}.{undo.tool}]"
        return undo_through_server

    def _check(self, name: str, check: McpCheck | Callable[[Any], Any] | None) -> Any:
        """The declaration's far-side check: a callable as given, or an :class:`McpCheck`
        calling its tool on the server registered under this server's name."""
        if check is None or callable(check):
            return check
        server_name, tool = self.server_name, check.tool

        async def check_through_server(ctx: CheckContext) -> CheckResult:
            protection = registry.protection_named(server_name, needed_for=f"check of {name}")
            result = await protection.server.call_tool(
                tool, {"idempotency_key": ctx.call_idempotency_key})
            if getattr(result, "isError", False) or getattr(result, "is_error", False):
                return CheckResult.unknown(saw={"is_error": True})
            document = result_document({
                "structured_content": getattr(result, "structuredContent", None),
                "output": [{"text": getattr(item, "text", None)} for item in getattr(result, "content", [])],
            })
            found = document.get("found") if isinstance(document, Mapping) else None
            if found is True:
                return CheckResult.ran(document, saw=document)
            if found is False:
                return CheckResult.not_run(saw=document)
            return CheckResult.unknown(saw=document)

        check_through_server.__qualname__ = f"mcp_check[{server_name}.{tool}]"
        return check_through_server

    # --- the seams ------------------------------------------------------------------------
    def _pre_approval_pass(self, ctx: Any, entry: McpToolPolicy | None) -> bool:
        """Whether this guardrail pass is the one before an approval (the SDK's
        ``pre_approval_tool_input_guardrails``): a call that may still pause writes no INTENT."""
        config = getattr(getattr(ctx, "run_config", None), "tool_execution", None)
        if not getattr(config, "pre_approval_tool_input_guardrails", False):
            return False
        return ctx.is_tool_approved(ctx.tool_name, ctx.tool_call_id) is None and entry is not None \
            and entry.reversibility is Reversibility.IRREVERSIBLE

    async def on_input(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        """The INTENT guardrail (seam 1 of the module doc)."""
        saga = current_saga.get()
        if saga is None or saga.closed:
            return ToolGuardrailFunctionOutput.allow()
        ctx = data.context
        # The policy names the server's own tool names, also when the agent prefixes them.
        public, call_id, raw = ctx.tool_name, ctx.tool_call_id, ctx.tool_arguments or ""
        name = self.own_name(public)  # journaled under ``public``, the name approvals match
        if self._pre_approval_pass(ctx, self.policy.tools.get(name)):
            return ToolGuardrailFunctionOutput.allow()
        try:
            missing = await self.missing_undo_tools()
            # Only a call checked against the tool's definition (irreversible: its approval is
            # bound to it; pinned by the policy) lists the server's tools; the others go on
            # without that round trip (their decision does not depend on the definition).
            definition = (await self.definition_of(name, fresh=True)
                          if self.guards_definition(name) else None)
        except Exception as exc:  # noqa: BLE001 - fail closed: nothing is journaled, nothing runs
            return ToolGuardrailFunctionOutput.raise_exception(
                output_info=f"MCP server {self.server_name!r} could not list its tools: {exc}")
        if missing:  # fail closed: a policy whose undo cannot be called is wrong, say so now
            why = (f"the policy of MCP server {self.server_name!r} names undo tools the server does "
                   f"not list: {', '.join(missing)}; fix the policy (no call of this server runs "
                   "until then)")
            saga.fail_now(public, call_id, why)  # nothing journaled for the call: it never ran
            return ToolGuardrailFunctionOutput.reject_content(f"Tool call refused: {why}")
        decl = self.declaration_for(name, definition)
        agent = getattr(data.agent, "name", None)
        if decl is None and (self.mode == "enforce" or strict_scope.get()):
            error = ConfigurationError(self.refusal(name, public))
            try:
                await saga.refuse_undeclared_call(public, call_id, raw, error)
            except ConfigurationError as refused:
                return ToolGuardrailFunctionOutput.reject_content(str(refused))
        grant = None
        if decl is not None and decl.reversibility is Reversibility.IRREVERSIBLE:
            grant = {"arguments": raw_args_value(raw), "mcp_tool": definition}
        try:
            if decl is not None:  # compensation finds this call's undo bound on the saga
                saga.note_declaration(public, decl, agent)
            intent = await saga.begin_external_call(decl, public, call_id, raw, agent=agent,
                                                    grant_args=grant, owned=True)
        except ApprovalError as exc:  # journaled FAILED: the call does not run
            return ToolGuardrailFunctionOutput.reject_content(f"Tool call refused: {exc}")
        except Exception as exc:  # noqa: BLE001 - fail closed: the tool must not run
            return ToolGuardrailFunctionOutput.raise_exception(output_info=str(exc))
        self._calls[ctx] = _Call(saga, call_id, public, saga.core.derivation.call_key(saga.saga_id, intent.seq), decl)
        self.seen[name] += 1
        self.made.add((saga.saga_id, call_id))
        return ToolGuardrailFunctionOutput.allow()

    def refusal(self, name: str, public: str) -> str:
        """Why a call of the tool ``name`` (called ``public`` by the run) is refused, and what
        to do about it (the policy, not a decorator, declares an MCP tool)."""
        called = f" (called {public!r})" if public != name else ""
        where = f"MCP tool {name!r}{called} of server {self.server_name!r}"
        why = f"{self.mode} mode" if self.mode == "enforce" else "observe mode under strict=True"
        if name in self.policy.tools:
            return (f"{where} no longer matches the definition_sha256 its policy pins (the server "
                    f"changed the tool; {why}): review what changed, then update the pin (the "
                    "observe skeleton lists the new digest)")
        return (f"{where} is not named by the server's policy ({why}): add it to the policy's "
                f'"tools", e.g. "{name}": {{"reversibility": "read_only"}} (or no_undo, '
                "irreversible, or compensatable with an undo), or run protect_mcp_server(server, "
                'mode="observe", skeleton=PATH) to have one suggested from what the server lists')

    def meta_for(self, run_context: Any) -> dict[str, Any] | None:
        """The ``_meta`` entries of ours for the call whose ``ToolContext`` is ``run_context``."""
        call = self._calls.get(run_context)
        return {IDEMPOTENCY_META_KEY: call.key} if call is not None else None

    async def on_result(self, run_context: Any, is_error: bool | None, structured: Any, output: Any) -> None:
        """Journal the outcome the extractor sees (seam 4)."""
        call = self._calls.pop(run_context, None)
        if call is None:
            return
        if is_error:
            failure = McpCallFailed(f"MCP tool {call.tool} on server {self.server_name!r} returned "
                                    f"isError: {_text_of(output)[:500]}")
            task = call.saga.end_external_call(call.call_id, exc=failure, declaration=call.decl,
                                               owner=True)
        else:
            result = {"is_error": False, "output": output,
                      "structured_content": dict(structured) if structured is not None else None}
            task = call.saga.end_external_call(call.call_id, result=result, declaration=call.decl,
                                               owner=True)
        if task is not None:
            await task
        await self._observed()

    async def on_output(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        """A call the extractor never saw raised before returning a result (seam 5): the
        connection dropped, the server died, the client timed out. The request may have reached
        the server and acted, so no outcome is written: its INTENT stays **in doubt** (never
        undone blindly, reported to a human, ``sagacity saga resolve``), the core's convention for
        a call whose end nobody saw (``core.ledger``). The saga is failed, so the run ends
        IN_DOUBT. An ``isError`` result is not this case: the server answered (FAILED, seam 4)."""
        call = self._calls.pop(data.context, None)
        if call is not None:
            call.saga.fail_now(call.tool, call.call_id, (
                f"MCP tool {call.tool} on server {self.server_name!r} raised before returning a "
                "result; it may have reached the server, so its outcome is unknown (in doubt); "
                f"the model got: {_text_of(data.output)[:500]}"))
            await self._observed()
        return ToolGuardrailFunctionOutput.allow()

    async def _observed(self) -> None:
        if self.mode == "observe" and self.skeleton_path is not None:
            with contextlib.suppress(Exception):  # a skeleton is advice: never fail a call for it
                await self.write_skeleton()

    def needs_approval(self, name: str) -> bool:
        """Whether the policy makes every call of ``name`` wait for a human (irreversible, by
        name: a tool whose definition changed still pauses, then resume refuses it)."""
        entry = self.policy.tools.get(name)
        return entry is not None and entry.reversibility is Reversibility.IRREVERSIBLE


class _WithArguments:
    """A ``CompensationContext`` whose ``args`` are the forward call's parsed raw arguments."""

    def __init__(self, ctx: CompensationContext, args: dict[str, Any]) -> None:
        self._ctx = ctx
        self.args = args

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _declaration_id(server: str, name: str, entry: McpToolPolicy) -> str:
    """``mcp:SERVER:TOOL#`` + 12 hex digits of SHA-256 of the policy entry (reversibility, undo
    tool and arguments; a callable counts by its qualified name). Journaled with each INTENT: a
    recovery finds the undo of the entry that was in force, in any process that loads the same
    policy, and two policies for one tool never share an id (which would make it ambiguous)."""
    undo = entry.undo
    args: Any = None
    if undo is not None:
        args = getattr(undo.arguments, "__qualname__", None) if callable(undo.arguments) else dict(undo.arguments)
    shape: dict[str, Any] = {"reversibility": entry.reversibility.value,
                             "undo": undo.tool if undo else None, "arguments": args}
    if isinstance(entry.check, McpCheck):  # only when set: ids of policies without one unchanged
        shape["check"] = entry.check.tool
    return f"mcp:{server}:{name}#{sha256_hex(canonical_bytes(shape))[:12]}"


def _chain_approval(protection: McpProtection, previous: Any) -> Any:
    async def policy(run_context: Any, agent: Any, tool: Any) -> bool:
        if protection.needs_approval(tool.name):
            return True
        if callable(previous):
            return bool(await _maybe_await(previous(run_context, agent, tool)))
        if isinstance(previous, dict):
            return bool(previous.get(tool.name, False))
        return bool(previous)

    return policy


def protect_mcp_server(
    server: Any,
    *,
    policy: McpPolicy | Mapping[str, Any] | str | Path | None = None,
    mode: str = "enforce",
    skeleton: str | Path | None = None,
) -> McpProtection:
    """Journal every tool call of a local MCP server inside the saga.

    It changes the server object in place, adding to what the application gave it: our INTENT
    guardrail is appended to ``tool_input_guardrails`` (last), our outcome guardrail prepended
    to ``tool_output_guardrails`` (first), ``custom_data_extractor`` and ``tool_meta_resolver``
    become ours, calling the application's own (its ``_meta`` and custom data are kept), and the
    approval policy becomes "irreversible tools always, else the application's own
    ``require_approval``". Call it once per server object, before the run lists its tools.

    Args:
        server: an ``agents.mcp`` local server (stdio, SSE or streamable HTTP); its ``name`` is
            what the journal names, and what a recovery re-creates.
        policy: an :class:`~.policy.McpPolicy`, its JSON form as a dict, or the path of a policy
            file (``policy`` module doc). ``None`` only with ``mode="observe"``.
        mode: ``"enforce"`` (default): a tool the policy does not name, or whose definition
            changed since the policy pinned it, is refused (journaled FAILED, not run; the saga
            fails). ``"observe"``: every call runs and is journaled ``undeclared`` (never undone,
            reported still dirty), and ``skeleton`` is rewritten after each call.
        skeleton: where ``observe`` writes the policy skeleton (``McpProtection.write_skeleton``).

    One name, one live server: the undo of a call goes to the server object that made it while
    that one is connected, and later (resume, recovery) to the server registered under its name.
    So a second server object under a name whose first server is still connected is refused
    (two tenants must use two names); once the first is cleaned up, a new one of that name
    (a recovery's) replaces it.

    Returns:
        The :class:`McpProtection` (also registered under the server's name, for undos and
        approvals later in this process).

    Raises:
        DeclarationError: (also the SDK's ``UserError``) an invalid policy or mode, enforce
            without a policy, a server already protected, or another server object of the same
            name protected and still connected.
        TypeError: ``server`` is not an MCP server of this SDK version.
    """
    if mode not in MODES:
        raise as_user_error(DeclarationError(f"mode must be one of {MODES}, got {mode!r}"))
    if getattr(server, "_sagacity_protection", None) is not None:
        raise as_user_error(DeclarationError(f"MCP server {server.name!r} is already protected"))
    policy = _policy_of(policy, mode)
    protection = McpProtection(server, policy, mode, Path(skeleton) if skeleton is not None else None)
    try:
        registry.register(protection)  # first: a refused server is left as it was
    except DeclarationError as exc:
        raise as_user_error(exc) from None
    _hook_into(server, protection)
    return protection


def _policy_of(policy: McpPolicy | Mapping[str, Any] | str | Path | None, mode: str) -> McpPolicy:
    """The policy ``protect_mcp_server`` was given, loaded and its undos checked (an empty one
    in observe mode).

    Raises:
        DeclarationError: (also the SDK's ``UserError``) an invalid policy, enforce without one.
    """
    try:
        if policy is None:
            if mode == "enforce":
                raise DeclarationError("enforce mode needs a policy (run in observe mode to write one)")
            policy = McpPolicy()
        elif isinstance(policy, (str, Path)):
            policy = McpPolicy.load(policy)
        elif not isinstance(policy, McpPolicy):
            policy = McpPolicy.from_json(policy)
        policy.check_undos()
    except DeclarationError as exc:
        raise as_user_error(exc) from None
    return policy


def _hook_into(server: Any, protection: McpProtection) -> None:
    """Add ``protection`` to ``server`` in place: its INTENT guardrail last among the input
    guardrails, its outcome guardrail first among the output ones, meta resolver and data
    extractor wrapping the application's own, approval chained before the application's."""

    @tool_input_guardrail(name="sagacity_mcp_journal")
    async def journal_intent(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        return await protection.on_input(data)

    @tool_output_guardrail(name="sagacity_mcp_outcome")
    async def journal_outcome(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        return await protection.on_output(data)

    user_resolver = server.tool_meta_resolver
    user_extractor = server.custom_data_extractor

    async def resolve_meta(context: Any) -> dict[str, Any] | None:
        own = await _maybe_await(user_resolver(context)) if user_resolver is not None else None
        ours = protection.meta_for(context.run_context)
        if ours is None:
            return own  # type: ignore[no-any-return]
        return {**(own or {}), **ours}

    async def extract(context: Any) -> Any:
        await protection.on_result(context.run_context, context.is_error, context.structured_content,
                                   context.tool_output)
        return await _maybe_await(user_extractor(context)) if user_extractor is not None else None

    sdk.set_mcp_approval_policy(server, _chain_approval(protection, sdk.mcp_approval_policy(server)))
    server.tool_input_guardrails = [*(server.tool_input_guardrails or []), journal_intent]
    server.tool_output_guardrails = [journal_outcome, *(server.tool_output_guardrails or [])]
    server.tool_meta_resolver = resolve_meta
    server.custom_data_extractor = extract
    server._sagacity_protection = protection
