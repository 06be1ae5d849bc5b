"""Declaring tools: decorators that go *under* ``@function_tool``, on the plain function.

::

    @function_tool(timeout=10)
    @compensable(undo=cancel_hotel)
    async def book_hotel(city: str, nights: int) -> str: ...

Placing our decorator under ``@function_tool`` keeps every ``function_tool`` option the SDK's own
and puts the journaling *below* the SDK's error-to-message conversion: the wrapper sees the raw
exception first, journals it, and re-raises, and the SDK then converts it as usual
(sdk-notes.md, "Failures and the error-to-message conversion").

The wrapper keeps the function's signature, so the JSON schema is identical with and without it.
To learn the model's call id it adds a leading, positional-only ``ToolContext`` parameter when the
function has none (the SDK finds it by its annotation and strips it from the schema; it is named
``ctx`` unless the user has a parameter of that name). Outside a saga it calls the function
unchanged. It takes and refuses exactly what ``function_tool`` takes and refuses: the SDK
itself decides which callable objects it adapts (``normalize_callable_object``, its ``UserError``
for the others) and whether a callable takes a context (``function_schema``); a callable object's
wrapper is a callable object the SDK adapts as it adapts the user's (``sdk/shapes.py``).
``FunctionTool.__wrapped__`` is the wrapper, not the user's function (docs/architecture.md,
"Every tool shape ``function_tool`` accepts").

**Sensitive values** (``sensitive=`` on every decorator): besides the defaults (names such as
``password``, ``token``, ``cvv``, ``card_number``; Luhn-valid card numbers, also inside free
text), the fields a tool declares: bare names (``{"iban"}``, matched at any depth) or paths
rooted at ``args``, ``result``, ``undo_data``... (``{"result.token"}``), or a ``Sensitivity``
(defaults switched off, ``exempt=``). Such values are committed in the journal (a keyed HMAC and
a mask), stored encrypted only with ``SAGACITY_DATA_KEY``, and given in clear to the undo
(``core.protection``; docs/sensitive-data.md). The JSON schema the model sees is unchanged. A
compensatable tool whose undo data would hold one is refused without a master key.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from agents import FunctionTool, ModelBehaviorError, RunContextWrapper
from agents.function_schema import function_schema
from agents.tool_context import ToolContext

from ..core.canonical import canonical_bytes, parse_json, sha256_hex
from ..core.declarations import (
    DEFAULT_UNDO_TIMEOUT,
    Check,
    Classifier,
    Reversibility,
    SensitiveSpec,
    ToolDeclaration,
    Undo,
    check_undo,
    stable_module_name,
)
from ..core.saga import current_saga
from ..errors import DeclarationError, EncodingError
from ._sdk_internals import normalize_callable_object
from .shapes import callable_object_wrapper
from .user_errors import SdkDeclarationError, as_user_error

__all__ = [
    "DECLARATION_ATTR",
    "compensable",
    "declaration_of",
    "irreversible",
    "no_undo",
    "read_only",
]

F = TypeVar("F", bound=Callable[..., Any])

DECLARATION_ATTR = "__sagacity_declaration__"
"""Attribute under which a wrapped function carries its :class:`ToolDeclaration`."""

_ORDER_HINT = """\
{deco} must be applied to the plain function, *under* @function_tool:

    @function_tool(...)
    @{deco}{args}
    def {name}(...): ...
"""


def _is_function_like(func: Any) -> bool:
    """Whether ``function_tool`` takes ``func`` as it is (functions, methods, builtins, classes),
    rather than adapting a callable object (``agents.tool._normalize_function_tool_callable``)."""
    return inspect.isroutine(func) or inspect.isclass(func)


def _takes_context(func: Any) -> bool:
    """Whether the SDK passes ``func`` a context first: decided by the SDK's own
    ``function_schema`` (its first parameter annotated ``RunContextWrapper`` / ``ToolContext``,
    also inside ``Annotated[...]``, whatever its kind). Called with the options that refuse the
    least (no docstring parsing, no strict schema); anything it still refuses, ``function_tool``
    refuses too, with the same error."""
    return function_schema(func, use_docstring_info=False, strict_json_schema=False).takes_context


def _context_name(signature: inspect.Signature) -> str:
    """A name for the added context parameter that no user parameter has (the SDK finds the
    context parameter by its annotation, not its name)."""
    name = "ctx"
    while name in signature.parameters:
        name = "_" + name
    return name


def declaration_of(obj: Any) -> ToolDeclaration | None:
    """Return the declaration carried by a decorated function or by the ``FunctionTool`` built
    from it, or ``None`` when it has none."""
    if isinstance(obj, FunctionTool):
        fallback = getattr(obj, "_sagacity_fallback_declaration", None)
        if fallback is not None:
            return fallback  # type: ignore[no-any-return]
        obj = getattr(obj, "__wrapped__", None)
    return getattr(obj, DECLARATION_ATTR, None)


def _split_ctx(adds_ctx: bool, args: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """Return (tool context or None, the arguments the user function takes)."""
    if args and isinstance(args[0], RunContextWrapper):
        return args[0], (args[1:] if adds_ctx else args)
    return None, args


def _body_of(func: Any) -> Callable[..., Any]:
    """What the wrapper calls: ``func`` itself when the SDK takes it as it is, else the SDK's
    adapter of the callable object (raising the SDK's ``UserError`` for the shapes
    ``function_tool`` refuses: partials, wrapped instances, decorated or descriptor
    ``__call__`` methods, generic classes, misplaced context parameters)."""
    return func if _is_function_like(func) else normalize_callable_object(func)  # type: ignore[no-any-return]


def _wrap(func: Any, decl: ToolDeclaration, body: Callable[..., Any]) -> Any:
    """The saga wrapper ``function_tool`` builds the tool from, in place of ``func``.

    A function-like ``func`` gets a function wrapper with its metadata and signature; a callable
    object (accepted by the SDK's own check first, which raises the SDK's ``UserError`` for the
    shapes ``function_tool`` refuses) gets a callable-object wrapper the SDK adapts as it adapts
    the user's object (``sdk/shapes.py``). Either way the SDK calls the wrapper with a leading
    context (added when the user's callable takes none) and the arguments it would pass the
    user's callable, which the wrapper passes on unchanged and journals by parameter name, as
    the callable receives them (``*args`` as a list, ``**kwargs`` as a dict).
    """
    signature = inspect.signature(body)
    adds_ctx = not _takes_context(body)
    arguments = _by_parameter(signature, adds_ctx)

    def call_info(ctx: Any) -> tuple[str, str | None]:
        # Named as the SDK names the tool: ``namespace.name`` for a tool_namespace() tool.
        name = (getattr(ctx, "qualified_tool_name", None) or getattr(ctx, "tool_name", None)
                or getattr(func, "__name__", None) or type(func).__name__)
        return name, getattr(ctx, "tool_call_id", None)

    def refuse_ambiguous(ctx: Any, tool: str) -> None:
        # The SDK's json.loads keeps the last of duplicate keys: refuse the ambiguity the way
        # the SDK refuses invalid JSON (before the body, nothing journaled).
        raw = getattr(ctx, "tool_arguments", None)
        if raw:
            try:
                parse_json(raw)
            except EncodingError as exc:
                raise ModelBehaviorError(f"Invalid JSON input for tool {tool}: {exc}") from exc

    def agent_of(ctx: Any) -> str | None:
        return getattr(getattr(ctx, "agent", None), "name", None)

    is_async = inspect.iscoroutinefunction(body)
    if is_async:

        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            saga = current_saga.get()
            ctx, call_args = _split_ctx(adds_ctx, args)
            if saga is None or saga.closed:
                return await body(*call_args, **kwargs)
            tool, call_id = call_info(ctx)
            refuse_ambiguous(ctx, tool)
            return await saga.run_call(
                decl, tool, call_id, arguments(call_args, kwargs),
                lambda: body(*call_args, **kwargs), agent=agent_of(ctx),
            )

        wrapper: Callable[..., Any] = async_wrapper
    else:

        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            saga = current_saga.get()
            ctx, call_args = _split_ctx(adds_ctx, args)
            if saga is None or saga.closed:
                return body(*call_args, **kwargs)
            tool, call_id = call_info(ctx)
            refuse_ambiguous(ctx, tool)
            return saga.run_call_sync(
                decl, tool, call_id, arguments(call_args, kwargs),
                lambda: body(*call_args, **kwargs), agent=agent_of(ctx),
            )

        wrapper = sync_wrapper

    return _dressed(func, body, wrapper, decl, signature, adds_ctx, is_async)


def _by_parameter(signature: inspect.Signature, adds_ctx: bool) -> Callable[..., dict[str, Any]]:
    """``arguments(call_args, kwargs)``: the values a body with ``signature`` (what it is called
    with, its own context included) receives, by parameter name, its own context excluded."""
    first = next(iter(signature.parameters), None)

    def arguments(call_args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = signature.bind(*call_args, **kwargs)
        bound.apply_defaults()
        values = dict(bound.arguments)
        if not adds_ctx and first is not None:
            values.pop(first, None)
        return values

    return arguments


def _dressed(func: Any, body: Callable[..., Any], wrapper: Callable[..., Any],
             decl: ToolDeclaration, signature: inspect.Signature, adds_ctx: bool,
             is_async: bool) -> Any:
    """``wrapper`` as the SDK must see it, carrying ``decl``: for a function-like ``func``, with
    its metadata, annotations and signature (a leading context parameter added when the body
    takes none); for a callable object, the callable-object wrapper the SDK adapts."""
    function_like = body is func
    ctx_name = _context_name(signature) if adds_ctx else None
    if not function_like:
        made = callable_object_wrapper(func, body, wrapper, is_async=is_async, context_name=ctx_name)
        setattr(made, DECLARATION_ATTR, decl)
        return made
    functools.update_wrapper(wrapper, func)
    # A copy: functools.wraps would share (and we would then mutate) the user's dict; resolved
    # by the SDK through __wrapped__ (the user's module globals).
    annotations = dict(getattr(func, "__annotations__", None) or {})
    if ctx_name is not None:
        # Positional-only, so it fits before a user's positional-only parameters; named
        # so that it clashes with no user parameter (a ``ctx: int`` of the user's stays theirs).
        ctx_param = inspect.Parameter(ctx_name, inspect.Parameter.POSITIONAL_ONLY, annotation=ToolContext)
        signature = signature.replace(parameters=[ctx_param, *signature.parameters.values()])
        annotations = {ctx_name: ToolContext, **annotations}
    wrapper.__annotations__ = annotations
    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    setattr(wrapper, DECLARATION_ATTR, decl)
    return wrapper


_PLAIN = (str, int, float, bool, type(None))


def _captured(obj: Any) -> list[Any]:
    """The plain values (str, int, float, bool, None) a function closes over, or a callable
    object's plain attributes: what tells apart two tools one factory made (``booker("car")``
    and ``booker("hotel")``). Other values count by their type's name only."""
    if inspect.isclass(obj):
        return []  # a class used as a tool: its attributes are its code, not captured values
    if inspect.isroutine(obj):
        values: list[Any] = []
        for cell in getattr(inspect.unwrap(obj), "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            values.append(value if isinstance(value, _PLAIN) else type(value).__qualname__)
        return values
    attrs = sorted(getattr(obj, "__dict__", {}).items())
    return [[k, v if isinstance(v, _PLAIN) else type(v).__qualname__] for k, v in attrs]


def _declaration_id(func: Any, undo: Undo | None, explicit: str | None) -> str:
    """The declaration id journaled with each INTENT: ``explicit`` when given, else
    ``module:qualname`` of the function (or callable's class; the module as an import names it,
    ``core.declarations.stable_module_name``: ``app``, not ``__main__``, for a script run as
    ``python app.py``), followed, for tools made by a
    factory or closing over values, by ``#`` and 12 hex digits of SHA-256 of the canonical
    JSON of the values the function and its undo capture. The same in every process that
    makes the tool from the same values."""
    if explicit is not None:
        if not isinstance(explicit, str) or not explicit:
            raise SdkDeclarationError(f"declaration_id must be a non-empty string, got {explicit!r}")
        return explicit
    owner = func if _is_function_like(func) else type(func)
    module = getattr(owner, "__module__", None) or type(owner).__module__  # a method descriptor has none
    base = f"{stable_module_name(module)}:{owner.__qualname__}"
    captured: list[Any] = [_captured(func)]
    if undo is not None:
        undo_owner = undo if inspect.isroutine(undo) else type(undo)
        captured.append([getattr(undo_owner, "__qualname__", ""), _captured(undo)])
        if not captured[1][1]:
            captured.pop()
    if not any(captured):
        return base  # a module-level function: the readable id alone
    try:
        digest = sha256_hex(canonical_bytes(captured))
    except EncodingError:  # e.g. a NaN captured: its text still tells values apart
        digest = sha256_hex(repr(captured).encode("utf-8", "backslashreplace"))
    return f"{base}#{digest[:12]}"


def _declare(
    func: Any, reversibility: Reversibility, deco: str, args_hint: str, *,
    undo: Undo | None = None, classify: Classifier | None = None,
    declaration_id: str | None = None, undo_timeout: float = DEFAULT_UNDO_TIMEOUT,
    scope: str | None = None,
    **answers: Any,
) -> Callable[..., Any]:
    if isinstance(func, FunctionTool):
        raise SdkDeclarationError(
            _ORDER_HINT.format(deco=deco, args=args_hint, name=func.name)
            + f"\nIt was applied on top of the FunctionTool {func.name!r}."
        )
    if not callable(func):
        raise SdkDeclarationError(
            f"@{deco} decorates a function or a callable object (as function_tool takes), "
            f"got {func!r}"
        )
    if getattr(func, DECLARATION_ATTR, None) is not None:
        name = getattr(func, "__qualname__", func)
        raise SdkDeclarationError(f"{name} is already declared; use one saga decorator")
    body = _body_of(func)
    try:
        decl = ToolDeclaration(
            name=getattr(func, "__qualname__", None) or type(func).__qualname__,
            reversibility=reversibility,
            undo=undo,
            classify=classify,
            is_async=inspect.iscoroutinefunction(body),
            declaration_id=_declaration_id(func, undo, declaration_id),
            undo_timeout=undo_timeout,
            scope=scope,
            **answers,  # deadline, undo_needs, check, check_timeout (ToolDeclaration)
            # a derived id covers only plain captured values: objects are checked instead
            captured_by=(func, undo) if declaration_id is None else None,
        )
    except DeclarationError as exc:
        raise as_user_error(exc) from None
    return _wrap(func, decl, body)


def compensable(
    undo: Undo, *, classify: Classifier | None = None, declaration_id: str | None = None,
    undo_timeout: float = DEFAULT_UNDO_TIMEOUT, scope: str | None = None, deadline: float | None = None,
    undo_needs: tuple[str, ...] = (), check: Check | None = None,
    check_timeout: float | None = None, sensitive: SensitiveSpec = None,
) -> Callable[[F], F]:
    """Declare a tool whose effect has an undo, run in reverse order if the saga fails.

    Args:
        undo: ``def undo(ctx: CompensationContext) -> None`` (or ``async def``); it gets the
            journaled arguments, result, undo data and a stable idempotency key. Raising means the
            undo failed (journaled; compensation goes on).
        classify: optional ``(result) -> Verdict | None`` marking returned values as refused
            (no effect, saga goes on) or failed (saga fails).
        declaration_id: the id journaled with each INTENT, by which compensation and recovery
            find this tool's undo in any process. Default: ``module:qualname`` of the function,
            plus a digest of the plain values it and its undo capture (so ``booker("car")`` and
            ``booker("hotel")`` made by one factory differ). Give one explicitly when tools
            built alike capture no value that tells them apart.
        undo_timeout: seconds compensation waits for one run of the undo (finite, > 0; default
            60, ``core.declarations.DEFAULT_UNDO_TIMEOUT``: a remote cancel or refund call with
            one retry fits, and a hung undo holds the saga a minute, not for ever). Past it the
            undo is journaled *in doubt* (it may have acted), reported still dirty, and the
            walk goes on; ``recover`` retries it with the same idempotency key, so the far side
            must honour the key. An async undo is cancelled; a sync one cannot be, and its end
            is journaled when it returns (``after_in_doubt``: that attempt's outcome, counted
            once).
        scope: whose tool this is when one factory builds it for several (a tenant id):
            journaled with each INTENT; recovery runs only an undo of the same id and scope from
            the agent graph it is given (else: still dirty). Needed when tools under one id close
            over different objects (see Raises); the same id and scope declared again (tools
            built per request) is accepted, the newest serving new calls.
        deadline: seconds one call may take, journaled in its INTENT (``deadline_seconds``)
            when the SDK tool has no ``timeout``; default ``Sagacity(call_deadline=...)``, 300.
            A human may answer that a call in doubt did not run only after it.
        undo_needs: keys the undo reads from ``ctx.undo_data`` (e.g. ``("booking_id",)``): an
            undo whose undo data lacks one is not run, reported still dirty naming
            ``--undo-data`` (``sagacity saga resolve ... --ran --undo-data JSON``).
        check: a far-side check recovery runs on a call left in doubt before asking a human:
            ``(CheckContext) -> CheckResult`` (sync or async; ``sagacity_agents.saga``);
            raising counts as "unknown".
        check_timeout: seconds recovery waits for ``check`` (default ``undo_timeout``).
        sensitive: fields besides the defaults (``{"iban", "result.token"}``; module notes).

    Raises:
        DeclarationError: at decoration time, when ``undo`` is missing, not callable, cannot take
            one positional argument, ``undo_timeout``, ``deadline`` or ``check_timeout`` is not
            a finite number of seconds above 0, ``undo_needs`` is not a tuple of keys,
            ``check`` is not callable, ``scope`` is not a non-empty string, ``sensitive`` is
            refused (module notes), or the decorator sits on top of ``@function_tool``; or, with neither ``scope`` nor
            ``declaration_id``, when the function or undo captures other objects (compared with
            ``is``) than the first declaration made under the same derived id in this process
            (``core.declarations.captured_objects``: a factory called for two tenants).
    """
    if isinstance(undo, FunctionTool):
        raise SdkDeclarationError(
            _ORDER_HINT.format(deco="compensable", args="(undo=...)", name=undo.name)
            + "\ncompensable() takes the undo as its argument: @compensable(undo=my_undo)."
        )

    if undo is None:
        raise SdkDeclarationError("compensable: a compensatable tool needs undo=...")
    try:
        check_undo(undo, "compensable")
    except DeclarationError as exc:
        raise SdkDeclarationError(
            f"{exc}\n(Used bare, `@compensable` takes the tool function as its undo: write "
            "`@compensable(undo=my_undo)`.)"
        ) from None

    def decorate(func: F) -> F:
        return _declare(  # type: ignore[return-value]
            func, Reversibility.COMPENSATABLE, "compensable", "(undo=...)", undo=undo,
            classify=classify, declaration_id=declaration_id, undo_timeout=undo_timeout,
            scope=scope,
            deadline=deadline, undo_needs=undo_needs, check=check, check_timeout=check_timeout,
            sensitivity=sensitive,
        )

    return decorate


def _simple(reversibility: Reversibility, deco: str) -> Any:
    @overload
    def decorator(func: F, /) -> F: ...
    @overload
    def decorator(
        *, classify: Classifier | None = None, declaration_id: str | None = None,
        scope: str | None = None, deadline: float | None = None, check: Check | None = None,
        check_timeout: float | None = None, sensitive: SensitiveSpec = None,
    ) -> Callable[[F], F]: ...

    def decorator(
        func: Any = None, /, *, classify: Classifier | None = None,
        declaration_id: str | None = None, scope: str | None = None, deadline: float | None = None,
        check: Check | None = None, check_timeout: float | None = None,
        sensitive: SensitiveSpec = None,
    ) -> Any:
        answers: dict[str, Any] = {"deadline": deadline, "check": check,
                                   "check_timeout": check_timeout, "sensitivity": sensitive}
        if func is None:
            return lambda f: _declare(f, reversibility, deco, "", classify=classify,
                                      declaration_id=declaration_id, scope=scope, **answers)
        return _declare(func, reversibility, deco, "", classify=classify,
                        declaration_id=declaration_id, scope=scope, **answers)

    return decorator


read_only = _simple(Reversibility.READ_ONLY, "read_only")
read_only.__doc__ = """Declare a tool with no effect on the world: journaled, never compensated.

Usable bare (``@read_only``) or with ``classify=...``, ``declaration_id=...``, ``scope=...``,
``deadline=...``, ``check=...``, ``check_timeout=...`` and ``sensitive=...`` (as for
``compensable``); so do ``irreversible`` and ``no_undo``. Raises
``DeclarationError`` when placed on top of ``@function_tool``."""

irreversible = _simple(Reversibility.IRREVERSIBLE, "irreversible")
irreversible.__doc__ = """Declare a tool whose effect cannot be undone (a wire, a cancellation).

It must also carry the SDK's ``@function_tool(needs_approval=True)``: starting a saga with an agent
whose irreversible tool lacks it raises ``ConfigurationError``. Inside a saga it runs only after a
human approval of its exact arguments; compensation lists its executed calls as kept."""

no_undo = _simple(Reversibility.NO_UNDO, "no_undo")
no_undo.__doc__ = """Declare a tool that changes the world but has no undo (e.g. sending an email).

It runs without approval; when the saga fails, its executed calls are reported as still dirty."""
