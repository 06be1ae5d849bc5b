"""The wrapper of a decorated *callable object*, built so that ``function_tool`` adapts it exactly
as it adapts the user's object.

``function_tool`` takes functions as they are but adapts callable objects itself
(``agents.tool._normalize_function_tool_callable``): the tool is named after the class (a name it
may refuse), described by the class docstring when both the class and ``__call__`` have one,
documented by ``__call__``'s docstring otherwise, and ``use_docstring_info=False`` drops both.
A plain function in its place would be named, described and documented as a function. So the
wrapper of a callable object is itself a callable object: an instance of a class made for it,
named and documented as the user's class, whose ``__call__`` is a plain function with the user's
parameters (behind an added context parameter when the user's ``__call__`` takes none). The SDK's
adapter then decides everything about it as it would about the user's object; whether the SDK
takes the user's object at all is asked first, of the SDK (``normalize_callable_object``).

The ``__call__`` is generated from source text, the way ``dataclasses`` generates ``__init__``:
a function whose signature is real (the SDK refuses a ``__call__`` carrying ``__signature__``)
and whose body only forwards its arguments.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from agents.tool_context import ToolContext

__all__ = ["callable_object_wrapper"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _free_name(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name = "_" + name
    return name


def _forwarding_call(
    signature: inspect.Signature, impl: Callable[..., Any], is_async: bool
) -> Callable[..., Any]:
    """A plain function ``(self, <signature's parameters>)`` that calls ``impl`` with the same
    arguments, as the SDK's ``to_call_args`` would pass them (positional parameters and
    ``*args`` positionally, the rest by keyword). Defaults are set on the function afterwards, so
    the source names parameters only."""
    params = list(signature.parameters.values())
    names = {p.name for p in params}
    self_name = _free_name("self", names)
    impl_name = _free_name("sagacity_impl", names | {self_name})
    heads, passed = [self_name], []
    seen_star = False
    for index, param in enumerate(params):
        if param.kind is inspect.Parameter.KEYWORD_ONLY and not seen_star:
            heads.append("*")
            seen_star = True
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            heads.append(f"*{param.name}")
            passed.append(f"*{param.name}")
            seen_star = True
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            heads.append(f"**{param.name}")
            passed.append(f"**{param.name}")
        elif param.kind is inspect.Parameter.KEYWORD_ONLY:
            heads.append(param.name)
            passed.append(f"{param.name}={param.name}")
        else:
            heads.append(param.name)
            passed.append(param.name)
        last_positional_only = param.kind is inspect.Parameter.POSITIONAL_ONLY and (
            index + 1 == len(params) or params[index + 1].kind is not inspect.Parameter.POSITIONAL_ONLY)
        if last_positional_only:
            heads.append("/")
    call = f"{impl_name}({', '.join(passed)})"
    source = (f"def make({impl_name}):\n"
              f"    {'async ' if is_async else ''}def __call__({', '.join(heads)}):\n"
              f"        return {'await ' if is_async else ''}{call}\n"
              f"    return __call__\n")
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # noqa: S102 - generated from parameter names only, as dataclasses does
    function: Any = namespace["make"](impl)
    defaults = tuple(p.default for p in params
                     if p.kind in _POSITIONAL and p.default is not inspect.Parameter.empty)
    function.__defaults__ = defaults or None
    function.__kwdefaults__ = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY
                               and p.default is not inspect.Parameter.empty} or None
    return function  # type: ignore[no-any-return]


class _ClassDoc:
    """The wrapper class's ``__doc__``: the user's class docstring, read only when the SDK reads
    it (with ``use_docstring_info=False`` it never does, and neither do we)."""

    def __init__(self, owner: type) -> None:
        self.owner = owner

    def __get__(self, instance: Any, owner: type | None = None) -> str | None:
        return inspect.getdoc(self.owner)


def callable_object_wrapper(
    obj: Any, adapter: Any, impl: Callable[..., Any], *, is_async: bool, context_name: str | None,
) -> Any:
    """Return the wrapper object the SDK adapts in place of the callable object ``obj``.

    Args:
        obj: the user's callable object (already accepted by the SDK's own check).
        adapter: the SDK's adapter of ``obj`` (``normalize_callable_object``): its
            ``__signature__`` and resolved ``__annotations__`` are the tool's.
        impl: what the wrapper's ``__call__`` calls, with the same arguments (the saga wrapper).
        is_async: whether the user's ``__call__`` is a coroutine function.
        context_name: the name of a context parameter to add first (positional-only, annotated
            ``ToolContext``); ``None`` when the user's ``__call__`` takes a context already.

    Returns:
        An instance of a class named, qualified and documented as ``type(obj)``, whose plain
        ``__call__`` has the user's docstring, parameters, defaults and resolved annotations. The
        class also carries the annotations and name a function would (``__annotations__``,
        ``__name__``), so ``function_schema(wrapper)`` reads it like the SDK's adapter.
    """
    owner = type(obj)
    call_owner = next(o for o in owner.__mro__ if "__call__" in o.__dict__)
    signature: inspect.Signature = adapter.__signature__
    annotations = dict(adapter.__annotations__)
    if context_name is not None:
        ctx = inspect.Parameter(context_name, inspect.Parameter.POSITIONAL_ONLY, annotation=ToolContext)
        signature = signature.replace(parameters=[ctx, *signature.parameters.values()])
        annotations = {context_name: ToolContext, **annotations}
    call = _forwarding_call(signature, impl, is_async)
    call.__doc__ = call_owner.__dict__["__call__"].__doc__
    call.__annotations__ = annotations
    call.__qualname__ = f"{owner.__qualname__}.__call__"
    call.__module__ = owner.__module__
    wrapper_class = type(owner.__name__, (), {
        "__call__": call,
        "__doc__": _ClassDoc(owner),
        "__module__": owner.__module__,
        "__qualname__": owner.__qualname__,
        "__name__": owner.__name__,  # read on instances, as on a function
        "__annotations__": annotations,
    })
    return wrapper_class()
