"""Tools a factory builds around a per-tenant API client share one declaration id (its digest
covers plain values only); ``scope=`` (the tenant id) tells them apart and is journaled with each
INTENT. Recovery runs only undos of the agent graph it is given with the INTENT's id and scope:
each tenant's saga recovered with that tenant's agent undoes its own bookings on its own client;
with another tenant's agent nothing is undone, the calls stay dirty and the report names the
declaration and the scope; ``recover --all --app module:app`` with ``app(scope)`` recovers each
saga with its own tenant's agent. On SQLite and PostgreSQL (and memory where no process is
shared)."""

from __future__ import annotations

import asyncio
import gc

import pytest
from agents import Agent, UserError, function_tool
from click.testing import CliRunner

from sagacity_agents import Sagacity, SagaStatus, compensable, read_only
from sagacity_agents.backends import Phase
from sagacity_agents.errors import ConfigurationError
from sagacity_agents.cli import cli
from sagacity_agents.sdk.tools import declaration_of
from tests.backends import BACKENDS

from .helpers import scripted

pytestmark = pytest.mark.case("I-35")


class Client:
    """A tenant's API client: what the factory's tools close over."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.live: list[str] = []
        self.cancelled: list[str] = []

    def book(self, ref: str) -> str:
        self.live.append(ref)
        return ref

    def cancel(self, ref: str) -> None:
        self.cancelled.append(ref)
        if ref in self.live:
            self.live.remove(ref)


CLIENTS: dict[str, Client] = {}
"""The clients of this process by tenant, for :func:`app_for` (the CLI's ``--app``)."""


def booker(client: Client):
    """The factory: every tenant's ``book`` has one declaration id (the client is no plain
    value); each has its tenant as its scope."""

    @function_tool
    @compensable(undo=lambda ctx: client.cancel(ctx.args["ref"]), scope=client.tenant)
    def book(ref: str) -> str:
        return client.book(ref)

    return book


def tenant_agent(tenant: str, *turns) -> Agent:
    client = CLIENTS.setdefault(tenant, Client(tenant))
    return Agent(name="booking", model=scripted(*turns), tools=[booker(client)])


def app_for(scope: str | None) -> Agent:
    """``--app tests.sdk.test_tenant_recovery:app_for``: the agent of the saga's tenant."""
    assert scope is not None
    return tenant_agent(scope)


@pytest.fixture(params=BACKENDS, ids=str)
def location(request) -> str:
    CLIENTS.clear()
    return request.param.location(request)


@pytest.fixture(params=[b for b in BACKENDS if b.name != "memory"], ids=str)
def shared_location(request) -> str:
    """A journal another Sagacity (the CLI's) can open too."""
    CLIENTS.clear()
    return request.param.location(request)


async def two_tenants_left_open(s: Sagacity) -> dict[str, str]:
    """Tenant A books A1, tenant B books B1, each saga left open: tenant -> saga id."""
    sagas = {}
    for tenant in ("A", "B"):
        agent = tenant_agent(tenant, [("book", {"ref": f"{tenant}1"}, "c1")], "booked")
        result = await s.run(agent, "go", close=False)
        assert result.status is SagaStatus.OPEN
        sagas[tenant] = result.saga_id
    assert CLIENTS["A"].live == ["A1"] and CLIENTS["B"].live == ["B1"]
    return sagas


async def test_each_tenant_recovered_with_its_own_agent_undoes_on_its_own_client(location):
    s = Sagacity(location)
    try:
        sagas = await two_tenants_left_open(s)
        entries = await s.journal.entries(sagas["B"])
        intent = next(e for e in entries if e.phase is Phase.INTENT)
        assert intent.payload["scope"] == "B"
        assert intent.payload["declaration"].split("#")[0].endswith("booker.<locals>.book")
        for tenant in ("B", "A"):
            result = await s.recover(sagas[tenant], tenant_agent(tenant))
            assert result.status is SagaStatus.COMPENSATED, result.report
    finally:
        await s.aclose()
    assert CLIENTS["A"].cancelled == ["A1"] and CLIENTS["B"].cancelled == ["B1"]
    assert CLIENTS["A"].live == [] and CLIENTS["B"].live == []


async def test_a_tenant_recovered_with_another_tenants_agent_is_refused_still_dirty(location):
    s = Sagacity(location)
    try:
        sagas = await two_tenants_left_open(s)
        result = await s.recover(sagas["B"], tenant_agent("A"))
    finally:
        await s.aclose()
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert CLIENTS["A"].cancelled == [] and CLIENTS["B"].cancelled == []   # no undo ran anywhere
    assert CLIENTS["B"].live == ["B1"] and CLIENTS["A"].live == ["A1"]
    (dirty,) = result.report.still_dirty
    assert "booker.<locals>.book" in dirty.detail and "scope 'B'" in dirty.detail
    assert "not guessed" in dirty.detail and "'A'" in dirty.detail


async def test_an_agent_without_the_tool_runs_no_undo_made_elsewhere_in_the_process(location):
    """Tenant B's tools exist in this process, but the agent given has no such tool: nothing in
    the process is used instead."""
    s = Sagacity(location)
    try:
        sagas = await two_tenants_left_open(s)
        result = await s.recover(sagas["B"], Agent(name="booking", model=scripted()))
    finally:
        await s.aclose()
    assert result.status is SagaStatus.COMPENSATION_FAILED
    assert CLIENTS["B"].live == ["B1"] and CLIENTS["B"].cancelled == []
    (dirty,) = result.report.still_dirty
    assert "no undo registered" in dirty.detail and "scope 'B'" in dirty.detail


async def test_the_same_id_and_scope_declared_again_per_request_is_accepted(location):
    """Tools built per request (a new closure each time) under one id and scope: accepted; the
    newest serves new calls, and recovery with a freshly built agent undoes the call."""
    first = tenant_agent("A", [("book", {"ref": "A1"}, "c1")], "booked")
    again = tenant_agent("A", [("book", {"ref": "A2"}, "c1")], "booked")
    decls = [declaration_of(a.tools[0]) for a in (first, again)]
    assert decls[0] is not decls[1]
    assert {(d.declaration_id, d.scope) for d in decls} == {(decls[0].declaration_id, "A")}
    s = Sagacity(location)
    try:
        result = await s.run(again, "go", close=False)
        recovered = await s.recover(result.saga_id, tenant_agent("A"))
    finally:
        await s.aclose()
    assert recovered.status is SagaStatus.COMPENSATED
    assert CLIENTS["A"].cancelled == ["A2"]


async def recovered_wrongly(location: str) -> None:
    """Both tenants' sagas, each first recovered with the other tenant's agent: refused, left
    open COMPENSATION_FAILED (for ``recover --all``)."""
    s = Sagacity(location)
    try:
        sagas = await two_tenants_left_open(s)
        for tenant, other in (("A", "B"), ("B", "A")):
            wrong = await s.recover(sagas[tenant], tenant_agent(other))
            assert wrong.status is SagaStatus.COMPENSATION_FAILED
    finally:
        await s.aclose()


def test_recover_all_with_an_app_given_each_sagas_scope(shared_location):
    """After a wrong recovery of each, ``saga recover --all --app module:app_for`` gives each
    saga its own tenant's agent: both undone, each on its own client."""
    asyncio.run(recovered_wrongly(shared_location))
    assert CLIENTS["A"].cancelled == [] and CLIENTS["B"].cancelled == []
    out = CliRunner().invoke(cli, ["saga", "recover", "--all", "--app",
                                   "tests.sdk.test_tenant_recovery:app_for", "--db", shared_location])
    assert out.exit_code == 0, out.output
    assert "2 saga(s) recovered, 0 need a human" in " ".join(out.output.split())
    assert CLIENTS["A"].cancelled == ["A1"] and CLIENTS["B"].cancelled == ["B1"]


async def test_recover_all_of_the_facade_takes_a_scope_callable(location):
    s = Sagacity(location)
    try:
        sagas = await two_tenants_left_open(s)
        for tenant, other in (("A", "B"), ("B", "A")):
            await s.recover(sagas[tenant], tenant_agent(other))
        seen: list[str | None] = []

        def app(scope: str | None) -> Agent:
            seen.append(scope)
            return tenant_agent(scope or "?")

        done = await s.recover_all(app)
    finally:
        await s.aclose()
    assert sorted(seen) == ["A", "B"]
    assert all(r.status is SagaStatus.COMPENSATED for _sid, _why, r in done)
    assert CLIENTS["A"].cancelled == ["A1"] and CLIENTS["B"].cancelled == ["B1"]



async def left_open(location: str) -> dict[str, str]:
    s = Sagacity(location)
    try:
        return await two_tenants_left_open(s)
    finally:
        await s.aclose()


def test_recover_one_saga_with_an_app_given_its_scope(shared_location):
    """``saga recover SAGA_ID --app module:app_for``: the app is called with the saga's scope."""
    sagas = asyncio.run(left_open(shared_location))
    out = CliRunner().invoke(cli, ["saga", "recover", sagas["B"], "--app",
                                   "tests.sdk.test_tenant_recovery:app_for", "--db", shared_location])
    assert out.exit_code == 0, out.output
    assert "COMPENSATED" in out.output
    assert CLIENTS["B"].cancelled == ["B1"] and CLIENTS["A"].cancelled == []


def test_resume_refuses_an_app_that_takes_a_scope(shared_location):
    out = CliRunner().invoke(cli, ["saga", "resume", "nope", "--app",
                                   "tests.sdk.test_tenant_recovery:app_for", "--db", shared_location])
    assert out.exit_code == 2 and "takes a scope" in out.output


def unscoped_booker(client: Client, **identity):
    """The same factory without a scope (or with ``identity``: ``scope=`` or
    ``declaration_id=``)."""

    @function_tool
    @compensable(undo=lambda ctx: client.cancel(ctx.args["ref"]), **identity)
    def book(ref: str) -> str:
        return client.book(ref)

    return book


def test_a_factory_building_a_tool_for_a_second_tenant_without_a_scope_raises():
    """Tenant A's tool is accepted; tenant B's, under the same derived id around another client
    and with no scope, raises at declaration time (a configuration error, also the SDK's
    ``UserError``) naming the id and the way out. The refusal depends on nothing the garbage
    collector does: A's tool is gone by then."""
    first = declaration_of(unscoped_booker(Client("A")))
    assert first is not None and first.scope is None
    derived = first.declaration_id
    del first
    gc.collect()
    with pytest.raises(ConfigurationError) as raised:
        unscoped_booker(Client("B"))
    assert isinstance(raised.value, UserError)
    message = str(raised.value)
    assert repr(derived) in message and "scope=" in message and "declaration_id=" in message


def test_the_same_objects_declared_again_without_a_scope_are_accepted():
    """A factory called again around the very same client (a module reloaded, a tool list built
    twice for one tenant) is the same tool: accepted."""
    client = Client("A")
    decls = [declaration_of(unscoped_booker(client)) for _ in range(3)]
    assert len({d.declaration_id for d in decls}) == 1


def test_read_only_tools_rebuilt_around_other_objects_are_accepted():
    """Only compensatable declarations are checked: a read-only tool has no undo that could run
    on another tenant's calls."""

    def reader(client: Client):
        @function_tool
        @read_only
        def live(ref: str) -> str:
            return str(ref in client.live)

        return live

    assert reader(Client("A")) is not None and reader(Client("B")) is not None


async def test_two_tenants_with_explicit_scopes_are_journaled_and_each_undone_on_its_own(location):
    """The same factory given each tenant's scope: both accepted, each INTENT journals its
    scope, and each saga recovered with its own tenant's agent undoes on its own client."""
    clients = {t: Client(t) for t in ("A", "B")}
    s = Sagacity(location)
    try:
        sagas = {}
        for tenant, client in clients.items():
            agent = Agent(name="booking", model=scripted([("book", {"ref": f"{tenant}1"}, "c1")], "ok"),
                          tools=[unscoped_booker(client, scope=tenant)])
            sagas[tenant] = (await s.run(agent, "go", close=False)).saga_id
        for tenant, saga_id in sagas.items():
            intent = next(e for e in await s.journal.entries(saga_id) if e.phase is Phase.INTENT)
            assert intent.payload["scope"] == tenant
            rebuilt = Agent(name="booking", model=scripted(),
                            tools=[unscoped_booker(clients[tenant], scope=tenant)])
            assert (await s.recover(saga_id, rebuilt)).status is SagaStatus.COMPENSATED
    finally:
        await s.aclose()
    assert clients["A"].cancelled == ["A1"] and clients["B"].cancelled == ["B1"]


async def test_one_scope_rebuilt_per_request_around_fresh_clients_is_accepted(location):
    """Tools built per request around a fresh client under one scope: every build accepted; a
    call made by one build is undone by the build the recovery is given."""
    builds = [unscoped_booker(Client("A"), scope="A") for _ in range(3)]
    assert len({declaration_of(b).declaration_id for b in builds}) == 1
    store = Client("A")
    s = Sagacity(location)
    try:
        agent = Agent(name="booking", model=scripted([("book", {"ref": "A7"}, "c1")], "ok"),
                      tools=[unscoped_booker(store, scope="A")])
        saga_id = (await s.run(agent, "go", close=False)).saga_id
        rebuilt = Agent(name="booking", model=scripted(), tools=[unscoped_booker(store, scope="A")])
        assert (await s.recover(saga_id, rebuilt)).status is SagaStatus.COMPENSATED
    finally:
        await s.aclose()
    assert store.cancelled == ["A7"]


def test_an_explicit_declaration_id_is_accepted_around_other_objects():
    """``declaration_id=`` is an explicit identity: nothing is remembered, a tenant's own id or
    one id rebuilt per request around fresh clients is accepted."""
    ids = {declaration_of(unscoped_booker(Client(t), declaration_id=f"book-{t}")).declaration_id
           for t in ("A", "B")}
    assert ids == {"book-A", "book-B"}
    for _ in range(2):
        assert declaration_of(unscoped_booker(Client("C"), declaration_id="book-C")).scope is None
