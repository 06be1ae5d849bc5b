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
To learn the model's call id it adds a leading ``ctx: ToolContext`` parameter when the function
has none (the SDK strips it from the schema). Outside a saga it calls the function unchanged.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar, overload

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from ..core.declarations import Classifier, Reversibility, ToolDeclaration, Undo, check_undo
from ..core.saga import current_saga
from ..errors import DeclarationError

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


def _takes_context(func: Callable[..., Any]) -> bool:
    params = list(inspect.signature(func).parameters.values())
    if not params:
        return False
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - the SDK will report unresolvable annotations itself
        hints = {}
    ann = hints.get(params[0].name, params[0].annotation)
    origin = typing.get_origin(ann) or ann
    return origin is RunContextWrapper or origin is ToolContext


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


def _wrap(func: Callable[..., Any], decl: ToolDeclaration) -> Callable[..., Any]:
    adds_ctx = not _takes_context(func)
    signature = inspect.signature(func)

    names = [
        p.name for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                      inspect.Parameter.KEYWORD_ONLY)
    ]
    simple = len(names) == len(signature.parameters)  # no *args / **kwargs

    def arguments(call_args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The validated values the body receives, by parameter name (context excluded)."""
        if simple and len(call_args) + len(kwargs) == len(names):
            # The SDK passes every field (defaults filled in): no binding needed.
            values = dict(zip(names, call_args, strict=False))
            values.update(kwargs)
        else:
            bound = signature.bind(*call_args, **kwargs)
            bound.apply_defaults()
            values = dict(bound.arguments)
        if not adds_ctx:
            values.pop(names[0], None)
        return values

    def call_info(ctx: Any) -> tuple[str, str | None]:
        name = getattr(ctx, "tool_name", None) or func.__name__
        return name, getattr(ctx, "tool_call_id", None)

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            saga = current_saga.get()
            ctx, call_args = _split_ctx(adds_ctx, args)
            if saga is None or saga.closed:
                return await func(*call_args, **kwargs)
            tool, call_id = call_info(ctx)
            saga.declarations.setdefault(tool, decl)
            return await saga.run_call(
                decl, tool, call_id, arguments(call_args, kwargs), lambda: func(*call_args, **kwargs)
            )

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            saga = current_saga.get()
            ctx, call_args = _split_ctx(adds_ctx, args)
            if saga is None or saga.closed:
                return func(*call_args, **kwargs)
            tool, call_id = call_info(ctx)
            saga.declarations.setdefault(tool, decl)
            return saga.run_call_sync(
                decl, tool, call_id, arguments(call_args, kwargs), lambda: func(*call_args, **kwargs)
            )

        wrapper = sync_wrapper

    if adds_ctx:
        ctx_param = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=ToolContext)
        if "ctx" in signature.parameters:
            raise DeclarationError(
                f"{func.__qualname__}: a parameter named 'ctx' that is not the first parameter "
                "clashes with the call context the saga wrapper adds; rename it"
            )
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[ctx_param, *signature.parameters.values()]
        )
        # functools.wraps shares the function's annotations dict: copy, never mutate it.
        wrapper.__annotations__ = {"ctx": ToolContext, **getattr(func, "__annotations__", {})}
    setattr(wrapper, DECLARATION_ATTR, decl)
    return wrapper


def _declare(
    func: Any, reversibility: Reversibility, deco: str, args_hint: str, *,
    undo: Undo | None = None, classify: Classifier | None = None,
) -> Callable[..., Any]:
    if isinstance(func, FunctionTool):
        raise DeclarationError(
            _ORDER_HINT.format(deco=deco, args=args_hint, name=func.name)
            + f"\nIt was applied on top of the FunctionTool {func.name!r}."
        )
    if not callable(func) or not inspect.isroutine(func):
        raise DeclarationError(f"@{deco} decorates a plain function, got {func!r}")
    if getattr(func, DECLARATION_ATTR, None) is not None:
        raise DeclarationError(f"{func.__qualname__} is already declared; use one saga decorator")
    decl = ToolDeclaration(
        name=func.__qualname__,
        reversibility=reversibility,
        undo=undo,
        classify=classify,
        is_async=inspect.iscoroutinefunction(func),
    )
    return _wrap(func, decl)


def compensable(undo: Undo, *, classify: Classifier | None = None) -> Callable[[F], F]:
    """Declare a tool whose effect has an undo, run in reverse order if the saga fails.

    Args:
        undo: ``def undo(ctx: CompensationContext) -> None`` (or ``async def``); it gets the
            journaled arguments, result, undo data and a stable idempotency key. Raising means the
            undo failed (journaled; compensation goes on).
        classify: optional ``(result) -> Verdict | None`` marking returned values as refused
            (no effect, saga goes on) or failed (saga fails).

    Raises:
        DeclarationError: at decoration time, when ``undo`` is missing, not callable, cannot take
            one positional argument, or the decorator sits on top of ``@function_tool``.
    """
    if isinstance(undo, FunctionTool):
        raise DeclarationError(
            _ORDER_HINT.format(deco="compensable", args="(undo=...)", name=undo.name)
            + "\ncompensable() takes the undo as its argument: @compensable(undo=my_undo)."
        )

    if undo is None:
        raise DeclarationError("compensable: a compensatable tool needs undo=...")
    try:
        check_undo(undo, "compensable")
    except DeclarationError as exc:
        raise DeclarationError(
            f"{exc}\n(Used bare, `@compensable` takes the tool function as its undo: write "
            "`@compensable(undo=my_undo)`.)"
        ) from None

    def decorate(func: F) -> F:
        return _declare(  # type: ignore[return-value]
            func, Reversibility.COMPENSATABLE, "compensable", "(undo=...)", undo=undo, classify=classify
        )

    return decorate


def _simple(reversibility: Reversibility, deco: str) -> Any:
    @overload
    def decorator(func: F, /) -> F: ...
    @overload
    def decorator(*, classify: Classifier | None = None) -> Callable[[F], F]: ...

    def decorator(func: Any = None, /, *, classify: Classifier | None = None) -> Any:
        if func is None:
            return lambda f: _declare(f, reversibility, deco, "", classify=classify)
        return _declare(func, reversibility, deco, "", classify=classify)

    return decorator


read_only = _simple(Reversibility.READ_ONLY, "read_only")
read_only.__doc__ = """Declare a tool with no effect on the world: journaled, never compensated.

Usable bare (``@read_only``) or with ``classify=...``. Raises ``DeclarationError`` when placed on
top of ``@function_tool``."""

irreversible = _simple(Reversibility.IRREVERSIBLE, "irreversible")
irreversible.__doc__ = """Declare a tool whose effect cannot be undone (a wire, a cancellation).

It must also carry the SDK's ``@function_tool(needs_approval=True)``: starting a saga with an agent
whose irreversible tool lacks it raises ``ConfigurationError``. Inside a saga it runs only after a
human approval of its exact arguments; compensation lists its executed calls as kept."""

no_undo = _simple(Reversibility.NO_UNDO, "no_undo")
no_undo.__doc__ = """Declare a tool that changes the world but has no undo (e.g. sending an email).

It runs without approval; when the saga fails, its executed calls are reported as still dirty."""
