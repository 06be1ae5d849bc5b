"""What a developer declares about a tool: its reversibility, its undo, its result classifier.

Declarations are validated when they are made (at import/wrap time), so a missing or mistyped
undo fails at start-up, not during a refund.
"""

from __future__ import annotations

import enum
import inspect
import math
import sys
import threading
import types
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DeclarationError
from .data_keys import DATA_KEY_ENVVAR, master_key_configured
from .sensitive import DEFAULT_SENSITIVITY, Sensitivity

if TYPE_CHECKING:
    from .undo import CompensationContext

__all__ = [
    "DEFAULT_CALL_DEADLINE",
    "DEFAULT_UNDO_TIMEOUT",
    "Classifier",
    "Reversibility",
    "SensitiveSpec",
    "ToolDeclaration",
    "Undo",
    "Verdict",
    "add_declaration_finder",
    "check_undo",
    "declaration_by_id",
    "interchangeable",
    "is_ambiguous",
    "journaled_scopes",
    "stable_module_name",
    "unresolved_declaration",
]


class Reversibility(str, enum.Enum):
    """How a tool's effect can be taken back."""

    READ_ONLY = "read_only"
    """No effect on the world: journaled, never compensated."""
    COMPENSATABLE = "compensatable"
    """Has a declared undo, run in reverse order when the saga fails."""
    IRREVERSIBLE = "irreversible"
    """Cannot be undone: needs a human approval of the exact arguments before it runs."""
    NO_UNDO = "no_undo"
    """Changes the world but has no undo: reported as still dirty when the saga fails."""


class Verdict(str, enum.Enum):
    """A classifier's reading of a value the tool body returned."""

    OK = "ok"
    """The call did what it was asked (its effect, if any, exists)."""
    REFUSED = "refused"
    """The tool refused the request and changed nothing (e.g. a validation message); the model
    gets the value, the saga goes on, nothing is compensated for it."""
    FAILED = "failed"
    """The call failed: journaled as FAILED and the saga fails, as if the body had raised."""


DEFAULT_UNDO_TIMEOUT = 60.0
"""Seconds an undo may run before compensation stops waiting for it (``undo_timeout=``).

An undo is usually one call to a remote API (cancel a booking, refund a charge) whose client
gives up after 10 to 30 seconds, perhaps once retried: 60 s lets such a call finish, retry
included, while a hung undo holds the saga (its run lease, the undos after it) for at most one
minute instead of for as long as the process lives. An undo that outlasts it is journaled in
doubt and retried by ``recover`` with the same idempotency key (``core.compensation``)."""

DEFAULT_CALL_DEADLINE = 300.0
"""Seconds a protected call may take when neither the SDK tool (``function_tool(timeout=...)``)
nor its declaration (``deadline=``) sets one (``Sagacity(call_deadline=...)`` changes it).

Journaled in each INTENT as ``deadline_seconds``: a human may answer that a call in doubt did not
run only once its deadline (plus one lease period, a clock-skew margin) has passed
(``core.resolution``), because until then its holder may still be running it. Five minutes
covers a remote call with its client's retries; a tool that may run longer declares more."""

Undo = Callable[["CompensationContext"], "Awaitable[None] | None"]
"""An undo: takes a :class:`CompensationContext`, may be sync or async; raising means it failed."""

Classifier = Callable[[Any], "Verdict | str | None"]
"""Reads a returned value; returns a :class:`Verdict` (or its value); ``None`` means OK."""

SensitiveSpec = Sensitivity | Iterable[str] | None
"""What a declaration's ``sensitive=`` takes: ``None`` (the defaults), field names or rooted
paths (``{"card_number", "result.token"}``), or a :class:`~.sensitive.Sensitivity`."""

Check = Callable[[Any], Any]
"""A far-side check of a call in doubt: ``(CheckContext) -> CheckResult`` (or an awaitable of
one); see ``core.checks``."""


def positive_seconds(value: Any, what: str, name: str) -> float:
    """``value`` as a finite number of seconds > 0, or a clear error.

    Raises:
        DeclarationError: a bool, not a number, not finite, or not above 0.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise DeclarationError(f"{name}: {what} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def check_undo(undo: Any, tool_name: str) -> None:
    """Check that ``undo`` can be called with one :class:`CompensationContext`.

    Raises:
        DeclarationError: ``undo`` is not callable or its signature cannot take one argument.
    """
    if not callable(undo):
        raise DeclarationError(
            f"{tool_name}: undo must be a callable taking a CompensationContext, got {undo!r}"
        )
    try:
        sig = inspect.signature(undo)
    except (TypeError, ValueError) as exc:
        raise DeclarationError(f"{tool_name}: cannot inspect undo {undo!r}: {exc}") from exc
    try:
        sig.bind(object())
    except TypeError as exc:
        raise DeclarationError(
            f"{tool_name}: undo {getattr(undo, '__qualname__', undo)!r}{sig} cannot be called with "
            "one CompensationContext argument; declare it as `def undo(ctx: CompensationContext)`"
        ) from exc
    params = list(sig.parameters.values())
    annotation = params[0].annotation if params else inspect.Parameter.empty
    if isinstance(annotation, str):
        accepted = annotation.split(".")[-1] in ("CompensationContext", "Any", "object")
    else:
        accepted = annotation in (inspect.Parameter.empty, Any, object) or (
            isinstance(annotation, type) and annotation.__name__ == "CompensationContext"
        )
    if not accepted:
        raise DeclarationError(
            f"{tool_name}: undo {getattr(undo, '__qualname__', undo)!r}{sig} takes a "
            f"{annotation!r}, not a CompensationContext; declare it as "
            "`def undo(ctx: CompensationContext)`"
        )


@dataclass(frozen=True, slots=True, weakref_slot=True)
class ToolDeclaration:
    """A tool's saga declaration, attached to its wrapped function.

    Raises:
        DeclarationError: from the constructor, when a compensatable tool has no usable undo,
            another kind declares one, the classifier or the check is not callable,
            ``undo_timeout``, ``deadline`` or ``check_timeout`` is not a finite number of
            seconds above 0, ``undo_needs`` is not a tuple of keys (or is given to a tool
            that is not compensatable), or (``captured_by`` given) its function or undo
            captures other objects than the first declaration under its id, with no
            ``scope`` (:func:`_claim_objects`).
    """

    name: str
    """The Python function's qualified name (the SDK tool name may differ)."""
    reversibility: Reversibility
    """How the effect can be taken back."""
    undo: Undo | None = None
    """The undo of a compensatable tool."""
    classify: Classifier | None = None
    """Optional reader of returned values: refused / failed / ok."""
    is_async: bool = False
    """Whether the tool body is a coroutine function."""
    bound_settings: dict[str, Any] = field(default_factory=dict, compare=False)
    """Facts about the SDK tool this function was bound to (e.g. its timeout), filled at start-up."""
    declaration_id: str | None = None
    """A stable id of the declaration, the same in every process: ``module:qualname`` of the
    user's function (or callable's class), the module named as an import names it, however it
    was started (:func:`stable_module_name`: a script run as ``python app.py`` is ``app``, not
    ``__main__``). Journaled with each INTENT, so compensation and recovery find *this*
    declaration's undo even when another tool has the same name."""
    undo_timeout: float = DEFAULT_UNDO_TIMEOUT
    """Seconds compensation waits for one run of the undo (> 0, finite; default
    :data:`DEFAULT_UNDO_TIMEOUT`). Past it the undo is journaled in doubt (it may have acted) and
    left for ``recover`` to retry with the same idempotency key; a sync undo, which cannot be
    stopped, journals its real end when it returns (``core.compensation``)."""
    scope: str | None = None
    """Whose declaration this is when one id serves several (a tenant id for tools a factory
    builds around a per-tenant client): journaled with each INTENT as ``"scope"``; compensation
    and recovery run only an undo declared under the INTENT's id *and* scope (``None``: none)."""
    deadline: float | None = None
    """Seconds one call may take (> 0, finite), journaled in its INTENT as ``deadline_seconds``;
    ``None``: the SDK tool's ``timeout``, else the saga's default
    (:data:`DEFAULT_CALL_DEADLINE`). A human's answer to a call in doubt waits for it
    (``core.resolution``)."""
    undo_needs: tuple[str, ...] = ()
    """Keys the undo reads from ``ctx.undo_data`` (e.g. ``("booking_id",)``): an undo whose undo
    data lacks one is not run; the call is reported still dirty, naming ``--undo-data``."""
    check: Check | None = None
    """A far-side check recovery runs on a call of this tool left in doubt, before a human is
    asked: ``(CheckContext) -> CheckResult`` (sync or async; ``core.checks``)."""
    check_timeout: float | None = None
    """Seconds recovery waits for :attr:`check` (default: :attr:`undo_timeout`); past it the
    verdict is "unknown"."""
    sensitivity: Sensitivity = DEFAULT_SENSITIVITY
    """What is sensitive in the tool's arguments, result, undo data and error text
    (``core.sensitive``): given as ``sensitive=`` (``None``: the defaults; field names or
    rooted paths such as ``"args.card_number"``; or a :class:`Sensitivity`), stored as a
    :class:`Sensitivity`. Every entry of its calls commits those values instead of holding them."""

    captured_by: InitVar[tuple[Any, ...] | None] = None
    """The tool's function and undo, given by an adapter whose ``declaration_id`` was derived
    (not given explicitly): a compensatable declaration without a scope is checked against the
    objects the first one under its id captured (:func:`_claim_objects`). Not stored."""

    def __post_init__(self, captured_by: tuple[Any, ...] | None) -> None:
        positive_seconds(self.undo_timeout, "undo_timeout", self.name)
        self._check_answers()
        self._check_sensitivity()
        if self.reversibility is Reversibility.COMPENSATABLE:
            if self.undo is None:
                raise DeclarationError(f"{self.name}: a compensatable tool needs undo=...")
            check_undo(self.undo, self.name)
        elif self.undo is not None:
            raise DeclarationError(
                f"{self.name}: only compensatable tools take an undo "
                f"(this one is {self.reversibility.value})"
            )
        if self.classify is not None and not callable(self.classify):
            raise DeclarationError(f"{self.name}: classify must be callable, got {self.classify!r}")
        if self.scope is not None and (not isinstance(self.scope, str) or not self.scope):
            raise DeclarationError(f"{self.name}: scope must be a non-empty string, got {self.scope!r}")
        if self.declaration_id is not None:
            if captured_by is not None:
                _claim_objects(self, captured_by)
            _register(self)

    def _check_answers(self) -> None:
        """Validate ``deadline``, ``undo_needs``, ``check`` and ``check_timeout``."""
        if self.deadline is not None:
            object.__setattr__(self, "deadline", positive_seconds(self.deadline, "deadline", self.name))
        if self.check_timeout is not None:
            positive_seconds(self.check_timeout, "check_timeout", self.name)
        needs = self.undo_needs
        if isinstance(needs, str) or not all(isinstance(n, str) and n for n in needs):
            raise DeclarationError(
                f"{self.name}: undo_needs must be a tuple of undo-data keys, got {needs!r}")
        object.__setattr__(self, "undo_needs", tuple(needs))
        if needs and self.reversibility is not Reversibility.COMPENSATABLE:
            raise DeclarationError(f"{self.name}: only a compensatable tool's undo has undo_needs")
        if self.check is not None and not callable(self.check):
            raise DeclarationError(f"{self.name}: check must be callable, got {self.check!r}")

    def _check_sensitivity(self) -> None:
        """Turn ``sensitive=`` into a :class:`Sensitivity`; refuse a compensatable tool whose
        undo data would hold a sensitive value while no master key is configured: the value
        would be committed and not stored, and the undo would get only its mask (issue rule:
        refused at declaration, naming the variable, not discovered at refund time)."""
        spec = self.sensitivity
        if not isinstance(spec, Sensitivity):
            try:
                spec = Sensitivity.of(spec)
            except (TypeError, ValueError) as exc:
                raise DeclarationError(f"{self.name}: sensitive=: {exc}") from None
            object.__setattr__(self, "sensitivity", spec)
        if self.reversibility is Reversibility.COMPENSATABLE and \
                spec.declares_undo_data(self.undo_needs) and not master_key_configured():
            raise DeclarationError(
                f"{self.name}: its undo data holds a sensitive value (sensitive= names an "
                "undo_data field, or undo_needs names a sensitive key), and no master key is "
                f"configured: the value would be committed, not stored, and the undo would get "
                f"only its mask. Set {DATA_KEY_ENVVAR} (32 random bytes, base64) before the "
                "tool is declared (docs/sensitive-data.md), or keep the value out of the undo data")

    def verdict(self, result: Any) -> Verdict:
        """Classify a returned value (OK without a classifier).

        Raises:
            Exception: whatever the classifier raises; the caller journals it as a failure.
        """
        if self.classify is None:
            return Verdict.OK
        answer = self.classify(result)
        return Verdict.OK if answer is None else Verdict(answer)


def stable_module_name(name: str) -> str:
    """The name under which another process imports the module called ``name`` here.

    Only ``__main__`` changes: the module started as a program is named after what was started,
    so that a tool declared in a script has the same declaration id when the script runs
    (``python app.py``) and when recovery imports it (``--app app:agent``):

    * ``python -m pkg.app``: ``pkg.app`` (its import spec's name);
    * ``python path/app.py``: ``app``, preceded by the names of the folders above it that are
      packages (hold an ``__init__.py``): ``pkg.app`` for ``pkg/app.py`` in a package ``pkg``;
    * no file (an interactive session, ``python -c``): ``__main__`` (nothing names it; give such
      tools an explicit ``declaration_id``).

    Args:
        name: a module's ``__name__``.
    """
    if name != "__main__":
        return name
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)
    file = getattr(main, "__file__", None)
    if not file:
        return name
    path = Path(file).resolve()
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


_BY_ID: dict[str, weakref.ref[ToolDeclaration]] = {}
"""The latest declaration made in this process under each id (filled when it is made, at
decoration time), while it is alive; a later declaration under the same id replaces it."""

_SIGNATURES: dict[str, tuple[Any, ...]] = {}
"""Id -> what the first declaration under it was (reversibility, undo code, plain captured
values): a later one that differs makes the id ambiguous (:data:`_AMBIGUOUS`)."""

_AMBIGUOUS: set[str] = set()
"""Ids under which this process made declarations of *different* tools (another undo or another
reversibility): such an id cannot say which undo a journaled call needs."""


def _same_tool(a: ToolDeclaration, b: ToolDeclaration) -> bool:
    """Whether two declarations under one id are the same tool made again (a factory called
    twice with the same plain values, a module reloaded): same reversibility, same undo code,
    same plain captured values. Objects captured count by type: tools a factory builds around
    per-tenant objects need a ``scope`` (or their own id) to be told apart."""
    if a.reversibility is not b.reversibility:
        return False
    code_a = getattr(a.undo, "__code__", a.undo)
    code_b = getattr(b.undo, "__code__", b.undo)
    return code_a is code_b and _plain_cells(a.undo) == _plain_cells(b.undo)


def _plain_cells(func: Any) -> list[Any]:
    cells = getattr(func, "__closure__", None) or ()
    values: list[Any] = []
    for cell in cells:
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        values.append(value if isinstance(value, (str, int, float, bool, type(None)))
                      else type(value).__qualname__)
    return values


def interchangeable(a: ToolDeclaration, b: ToolDeclaration) -> bool:
    """Whether ``a`` and ``b`` would compensate alike: the same object, or the same id,
    reversibility and undo callable (one function declared once, bound on several agents).
    Two declarations a factory made (each with its own undo closure) are not interchangeable,
    even when :func:`_same_tool` cannot tell them apart."""
    return a is b or (a.declaration_id == b.declaration_id and a.reversibility is b.reversibility
                      and a.undo is b.undo)


def _register(decl: ToolDeclaration) -> None:
    """Note ``decl`` under its id (a later declaration of another tool under it makes the id
    ambiguous, :func:`is_ambiguous`)."""
    assert decl.declaration_id is not None
    signature = _signature(decl)
    if _SIGNATURES.setdefault(decl.declaration_id, signature) != signature:
        _AMBIGUOUS.add(decl.declaration_id)
    _BY_ID[decl.declaration_id] = weakref.ref(decl)


_FIRST_OBJECTS: dict[str, tuple[Any, ...]] = {}
"""Derived id -> the objects the first compensatable declaration under it without a scope
captured (held strongly: one record per id, i.e. per code site and the plain values it
captures, at most :data:`_MAX_REMEMBERED`). Never cleared: the check does not depend on what
is still alive or what the garbage collector has freed."""

_MAX_REMEMBERED = 4096
"""Ids remembered at most (a factory closing over a per-request plain value, a request id, makes
one id per value): past it, new ids are not remembered, so memory stays bounded."""

_FIRST_LOCK = threading.Lock()

_PLAIN_VALUES = (str, int, float, bool, type(None))


def captured_objects(*owners: Any) -> list[Any]:
    """The objects the functions (or callable objects) ``owners`` hold that a derived
    declaration id does not fold into its digest: what a closure captures other than plain
    values (str, int, float, bool, None), classes and modules, looked through nested functions
    and bound methods (``client.cancel`` counts as ``client``); a callable object's non-plain
    attributes. In the order met.

    Args:
        owners: a tool's function and its undo (``None`` skipped).
    """
    found: list[Any] = []
    seen: set[int] = set()
    for owner in owners:
        if owner is not None and not inspect.isclass(owner):
            if inspect.isroutine(owner):
                _collect(owner, found, seen)
            else:
                for value in getattr(owner, "__dict__", {}).values():
                    _collect(value, found, seen)
    return found


def _collect(value: Any, found: list[Any], seen: set[int]) -> None:
    if isinstance(value, _PLAIN_VALUES) or inspect.isclass(value) or inspect.ismodule(value):
        return
    if isinstance(value, types.MethodType):
        _collect(value.__self__, found, seen)
        value = value.__func__
    if inspect.isbuiltin(value):  # ``len`` (its __self__ a module) or ``items.append``
        _collect(value.__self__, found, seen)
        return
    if not isinstance(value, types.FunctionType):
        found.append(value)
        return
    if id(value) in seen:  # a closure that refers to itself
        return
    seen.add(id(value))
    for cell in getattr(inspect.unwrap(value), "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        _collect(inner, found, seen)


def _claim_objects(decl: ToolDeclaration, owners: tuple[Any, ...]) -> None:
    """Refuse a compensatable declaration, without a scope, under a derived id whose function or
    undo captures other objects (``is``) than the first such declaration under that id did: one
    factory called for two tenants, each with its own API client. Their journaled calls could
    not be told apart, and a recovery given one's agent could run its undo on the other's calls
    (the id's digest covers only plain values). With a scope or an explicit id nothing is
    remembered: the same id and scope declared again (tools built per request) is accepted.

    Only compensatable declarations: the others have no undo, so nothing of theirs runs on
    journaled calls (compensation reports them by kind), whatever they capture.

    Raises:
        DeclarationError: naming the id, ``scope=`` and ``declaration_id=``.
    """
    if decl.reversibility is not Reversibility.COMPENSATABLE or decl.scope is not None:
        return
    assert decl.declaration_id is not None
    objects = tuple(captured_objects(*owners))
    with _FIRST_LOCK:
        first = _FIRST_OBJECTS.get(decl.declaration_id)
        if first is None:
            if objects and len(_FIRST_OBJECTS) < _MAX_REMEMBERED:
                _FIRST_OBJECTS[decl.declaration_id] = objects
            return
    if len(first) == len(objects) and all(a is b for a, b in zip(first, objects, strict=True)):
        return
    kinds = ", ".join(type(o).__qualname__ for o in first) or "none"
    raise DeclarationError(
        f"{decl.name}: declaration id {decl.declaration_id!r} was first declared around other "
        f"objects ({kinds}) than this declaration captures, e.g. one factory called for two "
        "tenants with their own clients: their journaled calls could not be told apart, and "
        "a recovery could run one's undo on the other's calls. Pass scope= (e.g. the tenant "
        "id; the same scope for tools rebuilt per request) or declaration_id= to "
        "compensable(...)")


def _signature(decl: ToolDeclaration) -> tuple[Any, ...]:
    """What :func:`_same_tool` compares, kept without keeping the declaration alive."""
    return (decl.reversibility, getattr(decl.undo, "__code__", decl.undo), repr(_plain_cells(decl.undo)))


_FINDERS: list[Callable[[str], ToolDeclaration | None]] = []
"""Adapters' finders of declarations no code of this process made under an id (see
:func:`add_declaration_finder`)."""


def add_declaration_finder(finder: Callable[[str], ToolDeclaration | None]) -> None:
    """Let an adapter answer :func:`declaration_by_id` for ids no declaration of this process
    carries (idempotent). The MCP adapter uses it so that the undo of a call on a server this
    process does not have fails naming that server, instead of "no undo registered".

    Args:
        finder: ``(declaration_id) -> ToolDeclaration | None``; it must return a declaration
            without ``declaration_id`` (one that is not registered), or ``None``.
    """
    if finder not in _FINDERS:
        _FINDERS.append(finder)


def declaration_by_id(declaration_id: str) -> ToolDeclaration | None:
    """The declaration made in this process under ``declaration_id`` (the latest one, while it
    is alive), or ``None``. Compensation and recovery never use it (they run only undos of the
    agent graph they are given, and of each call as it starts): it is for inspection.

    Returns ``None`` as well for an id under which this process made declarations of different
    tools (:func:`is_ambiguous`): guessing could apply one tool's undo to another's effect.
    """
    if declaration_id in _AMBIGUOUS:
        return None
    ref = _BY_ID.get(declaration_id)
    found = ref() if ref is not None else None
    for finder in _FINDERS if found is None else ():
        found = finder(declaration_id)
        if found is not None:
            break
    return found


def unresolved_declaration(declaration_id: str) -> ToolDeclaration | None:
    """What an adapter's finder (:func:`add_declaration_finder`) says about an id no declaration
    of the agent graph given carries: a declaration whose undo only fails saying why (the MCP
    server it names is not protected here...), or ``None``. Never a declaration this process
    made: recovery runs only undos of the graph it is given."""
    for finder in _FINDERS:
        found = finder(declaration_id)
        if found is not None and found.declaration_id is None:
            return found
    return None


def journaled_scopes(entries: Any) -> list[str | None]:
    """The distinct scopes the INTENTs of ``entries`` journal (``None`` for an INTENT without
    one), in the order first met.

    Args:
        entries: a saga's journal entries (``JournalEntry``; other phases are skipped).
    """
    found: list[str | None] = []
    for entry in entries:
        if getattr(getattr(entry, "phase", None), "value", None) != "INTENT":
            continue
        payload = entry.payload if isinstance(entry.payload, dict) else {}
        if "declaration" not in payload:
            continue
        scope = payload.get("scope")
        scope = scope if isinstance(scope, str) else None
        if scope not in found:
            found.append(scope)
    return found


def is_ambiguous(declaration_id: str) -> bool:
    """Whether this process made declarations of different tools under ``declaration_id`` (tools
    built by one factory whose captured values do not tell them apart): give each its own id
    (``compensable(..., declaration_id=...)``)."""
    return declaration_id in _AMBIGUOUS
