"""The saga policy of one MCP server: what each of its tools does to the world, and how to undo it.

A policy is a reviewable JSON file (or the same structure built in Python)::

    {
      "server": "payments",
      "tools": {
        "balance": {"reversibility": "read_only"},
        "charge":  {"reversibility": "compensatable",
                    "undo": {"tool": "refund",
                             "arguments": {"charge_id": "$.result.charge_id"}}},
        "wire":    {"reversibility": "irreversible",
                    "definition_sha256": "3f1c..."}
      }
    }

``reversibility`` is one of ``read_only``, ``compensatable``, ``no_undo``, ``irreversible``
(``core.declarations.Reversibility``). A compensatable tool's undo is **another call on the same
server**: ``tool`` names it and ``arguments`` maps each of its arguments to a value, either a
literal or a *path expression* (a string starting with ``$.``):

* ``$.args.NAME...`` reads the forward call's arguments;
* ``$.result.NAME...`` reads the forward call's result: its ``structuredContent`` when the
  server returned one, else the JSON object or array in its (single) text content. A result with
  neither has no ``$.result``: the undo is not run (COMPENSATION_FAILED, "the result has neither
  structuredContent nor JSON text content"), never run with a guessed value.

Each step after the root is a key (``.charge_id``) or a list index (``.0``); a missing step is an
error of the same kind. A string that looks like a path but is not one of these two roots
(``$result.x``, ``$.reslt.x``) is refused when the policy is loaded; an undo tool the server does
not list is an error, naming it, when the server first lists its tools. In Python, ``arguments`` may instead be a callable
``(CompensationContext) -> dict`` (the journaled call's arguments and result are in
``ctx.args["arguments"]`` and ``ctx.result``).

``deadline_seconds`` (optional) is the call's deadline (journaled in its INTENT; a human may
answer that a call in doubt did not run only after it). ``check`` (optional) is a far-side check
recovery runs on a call left in doubt before a human is asked: ``{"tool": "find_charge"}`` calls
that tool of the server with ``{"idempotency_key": KEY}`` (the forward call's key, which the
server saw in ``_meta``); its answer's document (as ``$.result`` reads one) with ``"found":
true`` means the call ran, and that document is its undo data (the undo's ``$.result`` paths
read it: a call answered "ran" has no result of its own); ``"found": false`` means it did not
run; anything else is unknown. In Python, ``check`` may instead be a callable
``(CheckContext) -> CheckResult`` (``core.checks``). Undo data given with a human's answer
(``saga resolve --ran --undo-data``) stands in for the result the same way, and must hold every
key the undo's ``$.result`` paths start with.

``sensitive`` (optional) lists the tool's sensitive fields besides the defaults (field names,
or paths rooted at ``args``, ``result``, ``undo_data``...: ``["card_number", "result.token"]``);
``sensitive_defaults`` (optional) switches the defaults per tool: ``{"names": true,
"card_numbers": true, "exempt": ["token"]}`` (``core.sensitive.Sensitivity``). Such values are
committed in the journal, never held in clear (docs/sensitive-data.md).

``definition_sha256`` (optional, written by ``observe``) pins the tool's definition as the server
listed it (name, description, input schema; :func:`definition_digest`): a tool whose listed
definition no longer hashes to it is *undeclared* until the policy is reviewed, like a tool the
policy does not name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.canonical import (
    canonical_bytes,
    parse_json,
    sha256_hex,
    to_canonical_value,
)
from ...core.declarations import Reversibility, SensitiveSpec
from ...core.sensitive import Sensitivity
from ...errors import DeclarationError, EncodingError

__all__ = [
    "McpCheck",
    "McpPolicy",
    "McpToolPolicy",
    "McpUndo",
    "UndoArgumentsError",
    "definition_digest",
    "resolve_path",
    "tool_definition",
]

ArgumentsBuilder = Callable[[Any], Mapping[str, Any]]
"""``(CompensationContext) -> arguments of the undo call``."""


_PATH = re.compile(r"^\$\.(args|result)(\.[^.]+)*$")
"""A well-formed path expression (module doc)."""
_LOOKS_LIKE_PATH = re.compile(r"^\$[A-Za-z_.\[]")
"""A string meant as a path (``$result.x``, ``$.reslt``); ``$5`` stays a literal."""


class UndoArgumentsError(Exception):
    """The undo call's arguments cannot be built from the journaled call (a path that does not
    resolve, a result without structured or JSON content); the undo is not run."""


def tool_definition(tool: Any, server: str) -> dict[str, Any]:
    """The definition of an MCP tool as the server listed it, in canonical JSON form: what an
    approval is bound to and what ``definition_sha256`` pins.

    Args:
        tool: an ``mcp.types.Tool`` (v1 or v2: read through ``model_dump(by_alias=True)``).
        server: the server's name.

    Returns:
        ``{"server", "name", "description", "input_schema"}`` (description ``None`` when absent).
    """
    dumped = tool.model_dump(by_alias=True) if hasattr(tool, "model_dump") else dict(tool)
    return to_canonical_value({
        "server": server,
        "name": dumped.get("name"),
        "description": dumped.get("description"),
        "input_schema": dumped.get("inputSchema") or dumped.get("input_schema") or {},
    })


def definition_digest(definition: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a tool's name, description and input schema (the
    server name is left out, so a policy survives a renamed connection)."""
    core = {k: definition.get(k) for k in ("name", "description", "input_schema")}
    return sha256_hex(canonical_bytes(core))


def resolve_path(expression: str, args: Mapping[str, Any], result: Any) -> Any:
    """The value a path expression names (see the module doc).

    Args:
        expression: ``$.args...`` or ``$.result...``.
        args: the forward call's arguments.
        result: the journaled result of the forward call (``{"structured_content", "output"}``).

    Raises:
        UndoArgumentsError: the root is unknown, a step is missing, or the result has neither
            structured content nor JSON text content.
    """
    steps = expression[2:].split(".") if expression.startswith("$.") else []
    if not steps or steps[0] not in ("args", "result"):
        raise UndoArgumentsError(f"path {expression!r} must start with $.args or $.result")
    value: Any = args if steps[0] == "args" else result_document(result)
    for step in steps[1:]:
        if isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        elif isinstance(value, Mapping) and step in value:
            value = value[step]
        else:
            raise UndoArgumentsError(f"path {expression!r}: no {step!r} in {json.dumps(value)[:200]}")
    return value


def result_document(result: Any) -> Any:
    """What ``$.result`` reads: the structured content, else the JSON in the text content.

    Raises:
        UndoArgumentsError: neither is there.
    """
    if isinstance(result, Mapping):
        structured = result.get("structured_content")
        if isinstance(structured, Mapping):
            return structured
        output = result.get("output")
        items: list[Any] = [output] if isinstance(output, (str, Mapping)) else list(output or [])
        texts = [t for t in (i.get("text") if isinstance(i, Mapping) else i for i in items)
                 if isinstance(t, str)]
        if len(texts) == 1:
            try:
                parsed = parse_json(texts[0])
            except EncodingError:
                parsed = None
            if isinstance(parsed, (dict, list)):
                return parsed
    raise UndoArgumentsError(
        "the result has neither structuredContent nor JSON text content, so $.result cannot be "
        "read; declare the undo's arguments with $.args paths or a Python callable")


@dataclass(frozen=True)
class McpUndo:
    """The undo of a compensatable MCP tool: a call of ``tool`` on the same server.

    Args:
        tool: the server's tool that takes the effect back (e.g. ``refund``).
        arguments: its arguments: a mapping of literals and path expressions, or a callable
            ``(CompensationContext) -> dict``.
    """

    tool: str
    arguments: Mapping[str, Any] | ArgumentsBuilder = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse a malformed path expression now, not when an undo needs it.

        Raises:
            DeclarationError: a string that looks like a path (``$`` then a letter, ``.`` or
                ``[``) but is not ``$.args[.STEP...]`` or ``$.result[.STEP...]``.
        """
        if callable(self.arguments):
            return
        for name, value in self.arguments.items():
            if isinstance(value, str) and _LOOKS_LIKE_PATH.match(value) and not _PATH.match(value):
                raise DeclarationError(
                    f"undo {self.tool!r}, argument {name!r}: {value!r} is not a path expression: "
                    "write $.args.NAME... (the call's arguments) or $.result.NAME... (its result)")

    def build(self, ctx: Any) -> dict[str, Any]:
        """The undo call's arguments for the journaled call ``ctx`` (a ``CompensationContext``).

        Raises:
            UndoArgumentsError: a path does not resolve, or the callable did not return a dict.
        """
        if callable(self.arguments):
            built = self.arguments(ctx)
            if not isinstance(built, Mapping):
                raise UndoArgumentsError(f"the undo arguments callable returned {built!r}, not a dict")
            return dict(built)
        forward = (ctx.args or {}).get("arguments", {})
        result = ctx.result
        if result is None and isinstance(getattr(ctx, "undo_data", None), Mapping):
            # A call answered "ran" (a human, a far-side check): its undo data stands in for
            # the result it never journaled.
            result = {"structured_content": ctx.undo_data}
        return {name: resolve_path(value, forward, result)
                if isinstance(value, str) and value.startswith("$.") else value
                for name, value in self.arguments.items()}


    def result_keys(self) -> tuple[str, ...]:
        """The keys the undo's ``$.result`` paths start with: what undo data given in place of
        the result (a human's answer, a check's) must hold."""
        if callable(self.arguments):
            return ()
        keys = [value.split(".")[2] for value in self.arguments.values()
                if isinstance(value, str) and value.startswith("$.result.")]
        return tuple(dict.fromkeys(keys))


@dataclass(frozen=True)
class McpCheck:
    """A far-side check through the server (module doc): ``tool`` is called with
    ``{"idempotency_key": KEY}`` and answers ``{"found": true, ...}`` or ``{"found": false}``."""

    tool: str


@dataclass(frozen=True)
class McpToolPolicy:
    """One tool's entry of the policy.

    Raises:
        DeclarationError: an unknown reversibility, a compensatable tool without undo, or an undo
            on another kind.
    """

    reversibility: Reversibility
    undo: McpUndo | None = None
    definition_sha256: str | None = None
    deadline: float | None = None
    """The call's deadline, seconds (``deadline_seconds``; ``None``: the saga's default)."""
    check: McpCheck | Callable[[Any], Any] | None = None
    """The far-side check of a call in doubt (module doc)."""
    sensitive: SensitiveSpec = None
    """What is sensitive in the tool's values (module doc), a
    :class:`~sagacity_agents.core.sensitive.Sensitivity` once built."""

    def __post_init__(self) -> None:
        kind = Reversibility(self.reversibility)
        object.__setattr__(self, "reversibility", kind)
        try:
            object.__setattr__(self, "sensitive", Sensitivity.of(self.sensitive))
        except (TypeError, ValueError) as exc:
            raise DeclarationError(f"sensitive: {exc}") from None
        if (kind is Reversibility.COMPENSATABLE) != (self.undo is not None):
            raise DeclarationError(
                "a compensatable MCP tool needs an undo ({'tool': ..., 'arguments': {...}}), and "
                f"only a compensatable one takes one (this one is {kind.value})")


def _tool_from_json(name: str, data: Any) -> McpToolPolicy:
    if not isinstance(data, Mapping) or "reversibility" not in data:
        raise DeclarationError(f"policy tool {name!r}: expected an object with a reversibility")
    undo = data.get("undo")
    if undo is not None:
        if not isinstance(undo, Mapping) or not isinstance(undo.get("tool"), str):
            raise DeclarationError(f"policy tool {name!r}: undo needs a tool name")
        arguments = undo.get("arguments", {})
        if not isinstance(arguments, Mapping):
            raise DeclarationError(f"policy tool {name!r}: undo arguments must be an object")
        try:
            undo = McpUndo(undo["tool"], dict(arguments))
        except DeclarationError as exc:
            raise DeclarationError(f"policy tool {name!r}: {exc}") from exc
    check = data.get("check")
    if check is not None:
        if not isinstance(check, Mapping) or not isinstance(check.get("tool"), str):
            raise DeclarationError(f"policy tool {name!r}: check needs a tool name ({{'tool': ...}})")
        check = McpCheck(check["tool"])
    try:
        return McpToolPolicy(data["reversibility"], undo, data.get("definition_sha256"),
                             data.get("deadline_seconds"), check, _sensitivity_from_json(name, data))
    except ValueError as exc:
        raise DeclarationError(f"policy tool {name!r}: {exc}") from exc
    except DeclarationError as exc:
        raise DeclarationError(f"policy tool {name!r}: {exc}") from exc


_DEFAULT_SWITCHES = frozenset({"names", "card_numbers", "exempt"})


def _sensitivity_from_json(name: str, data: Mapping[str, Any]) -> Sensitivity:
    """A tool's ``sensitive`` and ``sensitive_defaults`` as a :class:`Sensitivity`.

    Raises:
        DeclarationError: ``sensitive`` is not a list of strings, or ``sensitive_defaults`` not
            an object of the switches the module doc names (booleans; ``exempt`` a list of names).
    """
    fields = data.get("sensitive", [])
    switches = data.get("sensitive_defaults", {})
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise DeclarationError("sensitive must be a list of field names or "
                               f"paths (e.g. [\"card_number\", \"result.token\"]), got {fields!r}")
    if not isinstance(switches, Mapping) or not _DEFAULT_SWITCHES.issuperset(switches) or any(
            not isinstance(switches.get(k, True), bool) for k in ("names", "card_numbers")) or not (
            isinstance(switches.get("exempt", []), list)
            and all(isinstance(e, str) for e in switches.get("exempt", []))):
        raise DeclarationError(
            "sensitive_defaults must be an object with \"names\" and "
            f"\"card_numbers\" (booleans) and \"exempt\" (a list of names), got {switches!r}")
    try:
        return Sensitivity(frozenset(fields), names=switches.get("names", True),
                           card_numbers=switches.get("card_numbers", True),
                           exempt=frozenset(switches.get("exempt", [])))
    except ValueError as exc:
        raise DeclarationError(f"sensitive: {exc}") from None


@dataclass(frozen=True)
class McpPolicy:
    """The policy of one MCP server: tool name -> :class:`McpToolPolicy`.

    Args:
        tools: the declared tools, by the name the server lists them under.
        server: the server name the policy was written for (informative; ``None``: any).
    """

    tools: Mapping[str, McpToolPolicy] = field(default_factory=dict)
    server: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> McpPolicy:
        """Read a policy file (see the module doc).

        Raises:
            DeclarationError: the file cannot be read or parsed, or an entry is invalid (named).
        """
        try:
            data = parse_json(Path(path).read_bytes())
        except (OSError, EncodingError) as exc:
            raise DeclarationError(f"MCP policy {path}: {exc}") from exc
        return cls.from_json(data, where=str(path))

    @classmethod
    def from_json(cls, data: Any, *, where: str = "policy") -> McpPolicy:
        """Build a policy from its JSON form.

        Raises:
            DeclarationError: as :meth:`load`.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("tools", {}), Mapping):
            raise DeclarationError(f"MCP {where}: expected an object with a 'tools' object")
        tools = {name: _tool_from_json(name, entry) for name, entry in data.get("tools", {}).items()}
        return cls(tools, data.get("server"))

    def check_undos(self) -> None:
        """Check that no tool is its own undo (the undo of ``charge`` may be any other tool of
        the server, declared or not).

        Raises:
            DeclarationError: a tool is its own undo.
        """
        for name, entry in self.tools.items():
            if entry.undo is not None and entry.undo.tool == name:
                raise DeclarationError(f"MCP tool {name!r} cannot be its own undo")

    def entry_for(self, name: str, definition: Mapping[str, Any] | None) -> McpToolPolicy | None:
        """The entry for the tool ``name`` as currently listed, or ``None`` (undeclared): not
        named, or pinned to another definition than ``definition``."""
        entry = self.tools.get(name)
        if entry is None or entry.definition_sha256 is None or definition is None:
            return entry
        return entry if definition_digest(definition) == entry.definition_sha256 else None


def skeleton(server: str, listed: Mapping[str, Mapping[str, Any]], seen: Mapping[str, int],
             known: McpPolicy | None) -> dict[str, Any]:
    """A policy skeleton for review: every listed tool with its definition digest, the entry the
    current policy gives it when it has one, else a suggestion (``read_only`` for a tool the
    server annotates ``readOnlyHint``, else ``irreversible``: until a human says otherwise, every
    call of it waits for an approval), how many calls ``observe`` saw, and its description."""
    tools: dict[str, Any] = {}
    for name, definition in sorted(listed.items()):
        entry = known.tools.get(name) if known is not None else None
        item: dict[str, Any] = {}
        if entry is not None:
            item["reversibility"] = entry.reversibility.value
            if entry.undo is not None and not callable(entry.undo.arguments):
                item["undo"] = {"tool": entry.undo.tool, "arguments": dict(entry.undo.arguments)}
        else:
            item["reversibility"] = "read_only" if definition.get("read_only_hint") else "irreversible"
            item["review"] = "suggested by observe: check it, and declare an undo if it has one"
        item["definition_sha256"] = definition_digest(definition)
        item["description"] = definition.get("description")
        item["calls_seen"] = seen.get(name, 0)
        tools[name] = item
    return {"server": server, "tools": tools}
