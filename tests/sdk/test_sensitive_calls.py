"""Sensitive values on the call path (issue: sensitive values committed, encrypted, shreddable):
what a tool declares (``sensitive=``) and the defaults, what its entries hold (commitments and
masks, never the value), and what its undo gets back (the clear value with a master key, the mask
without one, nothing at all once the saga's key was erased)."""

from __future__ import annotations

import base64
import json

import pytest
from agents import function_tool

from sagacity_agents import (
    CompensationContext,
    Sagacity,
    SagaStatus,
    compensable,
    irreversible,
    nested_agent_tool,
    no_undo,
    protect_tool,
    read_only,
    record_undo_data,
)
from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.core.compensation import compensate
from sagacity_agents.core.data_keys import DATA_KEY_ENVVAR, DataKeys, DataKeyStore, MasterKey
from sagacity_agents.core.recovery import Recovery
from sagacity_agents.core.sensitive import SENSITIVE_KEY, Sensitivity, is_committed
from sagacity_agents.core.signing import generate_key
from sagacity_agents.errors import ConfigurationError, DeclarationError
from sagacity_agents.sdk.fallback import FALLBACK_ATTR
from sagacity_agents.sdk.mcp.policy import McpPolicy

from .helpers import agent, scripted

CARD = "4000 0000 0000 0002"
CVV = "7391"
TOKEN = "tok_live_9f8e7d6c5b4a"
PASSWORD = "hunter2-correct-horse"
MASTER = base64.b64encode(bytes(range(32))).decode()


@pytest.fixture
def no_master_key(monkeypatch):
    monkeypatch.delenv(DATA_KEY_ENVVAR, raising=False)


def absent(entries, *values: str) -> None:
    """No entry's hashed bytes hold any of ``values``, as text or as a JSON string (a short one
    only quoted: four hex digits may occur inside a hash)."""
    for entry in entries:
        for value in values:
            assert json.dumps(value).encode() not in entry.canonical, (entry.seq, value)
            if len(value) > 8:
                assert value.encode() not in entry.canonical, (entry.seq, value)
                assert value.replace(" ", "").encode() not in entry.canonical, (entry.seq, value)


def of(entries, phase, tool):
    return [e for e in entries if e.phase is phase and e.tool == tool]


def payment_tools(log: list, *, fail: bool = False):
    def refund(ctx: CompensationContext) -> None:
        log.append(("refund", ctx.args, ctx.result, ctx.undo_data))

    @function_tool
    @compensable(undo=refund)
    def charge(card_number: str, cvv: str, amount: int) -> dict:
        record_undo_data({"card": card_number, "charge_id": "ch_1"})
        return {"charge_id": "ch_1", "token": TOKEN}

    @function_tool
    @compensable(undo=refund)
    async def hold(card_number: str, amount: int) -> dict:
        record_undo_data({"card": card_number, "hold_id": "h_1"})
        return {"hold_id": "h_1"}

    @function_tool
    @read_only
    def boom() -> str:
        raise RuntimeError("the run fails here")

    return charge, hold, boom


def payment_script(*, fail: bool):
    turns = [[("charge", {"card_number": CARD, "cvv": CVV, "amount": 5}, "c1"),
              ("hold", {"card_number": CARD, "amount": 7}, "c2")]]
    if fail:
        turns.append([("boom", {}, "c3")])
    return scripted(*turns, "done")


# --- declarations ---------------------------------------------------------------------------


@pytest.mark.case("X-01")
def test_the_schema_the_model_sees_is_the_same_with_and_without_sensitive(no_master_key):
    def undo(ctx: CompensationContext) -> None: ...

    def pay(card_number: str, note: str) -> str:
        return "ok"

    plain = function_tool(compensable(undo=undo)(pay))
    marked = function_tool(compensable(undo=undo, sensitive={"card_number", "args.note"})(pay))
    assert marked.params_json_schema == plain.params_json_schema
    assert marked.description == plain.description and marked.name == plain.name


@pytest.mark.case("X-01")
def test_every_declaration_carries_its_sensitivity(no_master_key):
    def undo(ctx: CompensationContext) -> None: ...

    def f(x: str) -> str:
        return x

    cases = {
        "compensable": compensable(undo=undo, sensitive={"iban"})(f),
        "read_only": read_only(sensitive=["result.token"])(f),
        "irreversible": irreversible(sensitive=("args.x",))(f),
        "no_undo": no_undo(sensitive=Sensitivity(frozenset({"x"}), names=False))(f),
    }
    found = {name: fn.__sagacity_declaration__.sensitivity for name, fn in cases.items()}
    assert found["compensable"].fields == {"iban"} and found["compensable"].names
    assert found["read_only"].names_path(("result", "token"))
    assert found["irreversible"].names_path(("args", "x"))
    assert not found["no_undo"].names and found["no_undo"].names_field("x")
    assert read_only(f).__sagacity_declaration__.sensitivity == Sensitivity()  # the defaults

    tool = function_tool(f, name_override="t")
    protected = protect_tool(tool, reversibility="read_only", sensitive={"x"})
    nested = nested_agent_tool(function_tool(f, name_override="n"), sensitive=["input"])
    assert getattr(protected, FALLBACK_ATTR).sensitivity.fields == {"x"}
    assert getattr(nested, FALLBACK_ATTR).sensitivity.fields == {"input"}


@pytest.mark.case("X-01")
def test_the_mcp_policy_declares_sensitive_fields_and_switches_defaults():
    policy = McpPolicy.from_json({"tools": {
        "pay": {"reversibility": "read_only", "sensitive": ["card_number", "result.token"],
                "sensitive_defaults": {"names": True, "card_numbers": False, "exempt": ["pin"]}},
        "list": {"reversibility": "read_only"},
    }})
    pay = policy.tools["pay"].sensitive
    assert pay.fields == {"card_number", "result.token"} and not pay.card_numbers
    assert pay.exempt == {"pin"} and not pay.names_field("pin") and pay.names_field("password")
    assert policy.tools["list"].sensitive == Sensitivity()


@pytest.mark.case("X-01")
@pytest.mark.parametrize("bad", [{"card": True}, 42, ["foo.card"], [""], ["args."]], ids=repr)
def test_a_bad_sensitive_value_is_refused_at_declaration(bad, no_master_key):
    def f(x: str) -> str:
        return x

    with pytest.raises(DeclarationError, match="sensitive"):
        read_only(sensitive=bad)(f)
    with pytest.raises(DeclarationError, match="sensitive"):
        protect_tool(function_tool(f), reversibility="no_undo", sensitive=bad)
    with pytest.raises(DeclarationError, match="sensitive"):
        McpPolicy.from_json({"tools": {"t": {"reversibility": "read_only", "sensitive": bad}}})


@pytest.mark.case("X-01")
def test_sensitive_undo_data_is_refused_without_a_master_key(monkeypatch, no_master_key):
    def undo(ctx: CompensationContext) -> None: ...

    def f(x: str) -> str:
        return x

    with pytest.raises(DeclarationError, match=DATA_KEY_ENVVAR):
        compensable(undo=undo, sensitive={"undo_data.card"})(f)
    with pytest.raises(DeclarationError, match=DATA_KEY_ENVVAR):
        compensable(undo=undo, undo_needs=("card_number",))(f)
    with pytest.raises(DeclarationError, match=DATA_KEY_ENVVAR):
        protect_tool(function_tool(f), reversibility="compensatable", undo=undo,
                     undo_needs=("api_token",))
    compensable(undo=undo, undo_needs=("booking_id",), sensitive={"args.card"})(f)  # not undo data
    read_only(sensitive={"undo_data.card"})(f)  # nothing to undo

    monkeypatch.setenv(DATA_KEY_ENVVAR, MASTER)
    compensable(undo=undo, sensitive={"undo_data.card"})(f)
    compensable(undo=undo, undo_needs=("card_number",))(f)


def test_a_data_key_of_the_wrong_shape_is_refused():
    with pytest.raises(ConfigurationError, match=DATA_KEY_ENVVAR):
        Sagacity(InMemoryJournal(), data_key="not a key")
    with pytest.raises(ConfigurationError, match="data_key"):
        Sagacity(InMemoryJournal(), data_key=42)  # type: ignore[arg-type]
    keys = DataKeys(MasterKey.from_text(MASTER))
    assert Sagacity(InMemoryJournal(), data_key=keys).data_keys is keys
    assert Sagacity(InMemoryJournal(), data_key=MASTER).data_keys.master is not None


# --- commitments in the journal -------------------------------------------------------------


@pytest.mark.case("X-02")
async def test_card_cvv_and_token_are_committed_in_every_entry_and_the_chain_verifies(journal):
    log: list = []
    sagacity = Sagacity(journal)
    result = await sagacity.run(agent(payment_script(fail=False), *payment_tools(log)), "pay")
    assert result.status is SagaStatus.COMPLETED
    entries = await journal.entries(result.saga_id)
    charge_intent, = of(entries, Phase.INTENT, "charge")
    hold_intent, = of(entries, Phase.INTENT, "hold")
    args = charge_intent.payload["args"]
    assert is_committed(args["card_number"]) and args["card_number"]["mask"] == "**** **** **** 0002"
    assert is_committed(args["cvv"]) and args["cvv"]["mask"] == "****"
    assert args["amount"] == 5
    executed, = of(entries, Phase.EXECUTED, "charge")
    assert is_committed(executed.payload["result"]["token"])
    assert executed.payload["result"]["charge_id"] == "ch_1"
    # One saga key: the same card commits alike in both calls and in the undo data.
    commitment = args["card_number"][SENSITIVE_KEY]
    assert hold_intent.payload["args"]["card_number"][SENSITIVE_KEY] == commitment
    assert executed.payload["undo_data"]["card"][SENSITIVE_KEY] == commitment
    absent(entries, CARD, CVV, TOKEN)
    assert all(v.ok for v in await sagacity.verify(result.saga_id))


@pytest.mark.case("X-02")
async def test_entry_tags_sign_the_committed_bytes(journal, tmp_path):
    generate_key(tmp_path / "keys", "writer-1")
    sagacity = Sagacity(journal, keyring=tmp_path / "keys")
    result = await sagacity.run(agent(payment_script(fail=False), *payment_tools([])), "pay")
    entries = await journal.entries(result.saga_id)
    assert all(e.tag_key == "writer-1" for e in entries)
    absent(entries, CARD, CVV, TOKEN)
    verdicts = await sagacity.verify(result.saga_id)
    assert all(v.ok and not v.unauthenticated for v in verdicts), verdicts


@pytest.mark.case("X-02")
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
async def test_a_password_quoted_in_an_exception_never_reaches_the_journal(journal, declared, sync):
    def login_sync(user: str, password: str) -> str:
        raise PermissionError(f"login of {user} refused: password {password} is wrong")

    async def login_async(user: str, password: str) -> str:
        raise PermissionError(f"login of {user} refused: password {password} is wrong")

    body = login_sync if sync else login_async
    tool = function_tool(read_only(body) if declared else body, name_override="login")
    model = scripted([("login", {"user": "bob", "password": PASSWORD}, "c1")], "done")
    sagacity = Sagacity(journal)
    result = await sagacity.run(agent(model, tool), "log in")
    entries = await journal.entries(result.saga_id)
    assert of(entries, Phase.FAILED, "login")
    absent(entries, PASSWORD)
    if declared:
        failed, = of(entries, Phase.FAILED, "login")
        assert "password **** is wrong" in failed.payload["error"]["mask"]
    else:
        intent, = of(entries, Phase.INTENT, "login")
        assert intent.payload["raw_args"]["mask"] == '{"user":"bob","password":"****"}'
    assert all(v.ok for v in await sagacity.verify(result.saga_id))


@pytest.mark.case("X-02")
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
async def test_a_token_in_a_result_with_no_declaration_is_committed(journal, declared):
    def issue(user: str) -> dict:
        return {"user": user, "access_token": TOKEN, "expires_in": 3600}

    tool = function_tool(read_only(issue) if declared else issue)
    model = scripted([("issue", {"user": "bob"}, "c1")], "done")
    result = await Sagacity(journal).run(agent(model, tool), "token")
    entries = await journal.entries(result.saga_id)
    executed, = of(entries, Phase.EXECUTED, "issue")
    assert is_committed(executed.payload["result"]["access_token"])
    assert executed.payload["result"]["expires_in"] == 3600
    absent(entries, TOKEN)


@pytest.mark.case("X-02")
async def test_a_declared_field_is_committed_and_a_switched_off_default_is_not(journal):
    @function_tool
    @read_only(sensitive=Sensitivity(frozenset({"result.iban"}), exempt=frozenset({"token"})))
    def page(token: str) -> dict:
        return {"iban": "DE44500105175407324931", "next": "p2"}

    model = scripted([("page", {"token": "page-cursor-1"}, "c1")], "done")
    result = await Sagacity(journal).run(agent(model, page), "page")
    entries = await journal.entries(result.saga_id)
    intent, = of(entries, Phase.INTENT, "page")
    executed, = of(entries, Phase.EXECUTED, "page")
    assert intent.payload["args"]["token"] == "page-cursor-1"  # a pagination token: exempt
    assert is_committed(executed.payload["result"]["iban"])
    absent(entries, "DE44500105175407324931")


# --- what the undo gets ---------------------------------------------------------------------


@pytest.mark.case("X-02")
async def test_with_a_master_key_the_undo_gets_the_clear_card_and_undo_data(journal):
    if not isinstance(journal, DataKeyStore):
        pytest.skip("this backend stores no data keys yet")
    log: list = []
    sagacity = Sagacity(journal, data_key=MASTER)
    result = await sagacity.run(agent(payment_script(fail=True), *payment_tools(log)), "pay")
    assert result.status is SagaStatus.COMPENSATED
    undone = {args.get("cvv", "hold"): (args, res, data) for _, args, res, data in log}
    args, res, data = undone[CVV]
    assert args == {"card_number": CARD, "cvv": CVV, "amount": 5}
    assert res == {"charge_id": "ch_1", "token": TOKEN}
    assert data == {"card": CARD, "charge_id": "ch_1"}
    assert undone["hold"][2] == {"card": CARD, "hold_id": "h_1"}
    entries = await journal.entries(result.saga_id)
    absent(entries, CARD, CVV, TOKEN)
    assert of(entries, Phase.INTENT, "charge")[0].sealed is not None
    stored = await journal.data_keys(result.saga_id)
    assert [row.generation for row in stored] == [1] and stored[0].wrapped is not None
    assert all(v.ok for v in await sagacity.verify(result.saga_id))


@pytest.mark.case("X-02")
async def test_without_a_master_key_the_undo_gets_the_mask(journal, no_master_key):
    log: list = []
    sagacity = Sagacity(journal)
    result = await sagacity.run(agent(payment_script(fail=True), *payment_tools(log)), "pay")
    assert result.status is SagaStatus.COMPENSATED
    undone = {args.get("cvv", "hold"): (args, res, data) for _, args, res, data in log}
    args, res, data = undone["****"]
    assert args == {"card_number": "**** **** **** 0002", "cvv": "****", "amount": 5}
    assert res == {"charge_id": "ch_1", "token": "****"}
    assert data == {"card": "**** **** **** 0002", "charge_id": "ch_1"}
    entries = await journal.entries(result.saga_id)
    assert all(getattr(e, "sealed", None) is None for e in entries)
    absent(entries, CARD, CVV, TOKEN)


class KeylessJournal(InMemoryJournal):
    """A data-key store that must not be touched (no master key: the key lives in memory)."""

    async def data_keys(self, saga_id):
        raise AssertionError("no master key: nothing to read")

    async def add_data_key(self, *args, **kwargs):
        raise AssertionError("no master key: nothing to store")


async def test_without_a_master_key_a_run_reads_and_stores_no_data_key(no_master_key):
    journal = KeylessJournal()
    result = await Sagacity(journal).run(agent(payment_script(fail=False), *payment_tools([])), "pay")
    assert result.status is SagaStatus.COMPLETED


@pytest.mark.case("X-02")
@pytest.mark.case("X-04")
async def test_an_erased_saga_is_reported_dirty_and_never_undone_on_masks():
    log: list = []
    journal = InMemoryJournal()
    if not isinstance(journal, DataKeyStore):
        pytest.skip("the memory journal stores no data keys yet")
    sagacity = Sagacity(journal, data_key=MASTER)
    tools = payment_tools(log)
    result = await sagacity.run(agent(payment_script(fail=False), *tools), "pay", close=False)
    assert await journal.erase_data_keys(result.saga_id, by="dpo", reason="erasure request") == 1

    recovery = Recovery(journal, sagacity.approvals, data_keys=DataKeys(MasterKey.from_text(MASTER)))
    secrets = await recovery.secrets(result.saga_id)
    declarations = {t.name: getattr(t, "__wrapped__").__sagacity_declaration__ for t in tools[:2]}
    report = await compensate(journal, result.saga_id, declarations, secrets=secrets)
    assert log == []  # neither undo ran
    assert len(report.failed) == 2 and not report.clean
    assert all("sensitive data erased" in item.detail for item in report.failed)
    assert all(v.ok for v in await sagacity.verify(result.saga_id))


async def test_parallel_sync_and_async_calls_commit_under_one_saga_key(journal):
    """Two calls of one turn (one sync, in a worker thread; one async) protect concurrently."""
    log: list = []
    result = await Sagacity(journal).run(agent(payment_script(fail=False), *payment_tools(log)), "pay")
    entries = await journal.entries(result.saga_id)
    commitments = {e.payload["args"]["card_number"][SENSITIVE_KEY]
                   for e in entries if e.phase is Phase.INTENT}
    assert len(commitments) == 1


# --- writers outside a run: a human's answer, a recovery in another process ------------------


@pytest.mark.case("X-02")
@pytest.mark.parametrize("undo_fails", [False, True], ids=["undo-ok", "undo-raises"])
async def test_an_answer_s_undo_data_is_committed_and_a_later_recovery_gets_it_clear(undo_fails):
    """A human answers "ran" with undo data holding a card: RESOLVED commits and seals it; a
    recovery (another process: its own keys object, the same master key) gives the undo the
    clear card and token, and an undo error quoting the token is journaled masked."""
    from .test_recovery import crashed_saga

    log: list = []

    def undo(ctx: CompensationContext) -> None:
        log.append((ctx.args.get("n"), ctx.undo_data))
        if undo_fails and ctx.undo_data:
            raise RuntimeError(f"refund with token {ctx.undo_data['refund_token']} bounced")

    @function_tool
    @compensable(undo=undo)
    async def step(n: int) -> int:
        return n

    journal = InMemoryJournal()
    first = Sagacity(journal, data_key=MASTER)
    sid = await crashed_saga(first.journal)  # c1, c2 executed; c3 (INTENT seq 6) in doubt
    await first.recover(sid, agent(scripted(), step))
    answer = {"card_number": CARD, "refund_token": TOKEN, "charge_id": "ch_9"}
    resolved = await first.resolve(sid, 6, ran=True, resolver="ops", reason="the bank charged it",
                                   undo_data=answer, force=True)
    assert is_committed(resolved.payload["undo_data"]["card_number"]) and resolved.sealed is not None
    assert resolved.payload["reason"] == "the bank charged it"

    later = Sagacity(journal, data_key=MASTER)  # another process: nothing known in memory
    result = await later.recover(sid, agent(scripted(), step))
    assert (3, answer) in log
    entries = await journal.entries(sid)
    absent(entries, CARD, TOKEN)
    if undo_fails:  # not a card number: masked because the recovery opened it (known values)
        failed = [e for e in entries if e.phase is Phase.COMPENSATION_FAILED]
        assert failed and "refund with token **** bounced" in failed[-1].payload["error"]["mask"]
        assert result.status is SagaStatus.COMPENSATION_FAILED
    else:
        assert result.status is SagaStatus.COMPENSATED
    assert all(v.ok for v in await later.verify(sid))


@pytest.mark.case("X-02")
async def test_a_signed_answer_whose_reason_quotes_a_card_is_masked_and_still_verifies(tmp_path):
    """A human's reason is signed and journaled twice (``forced``): it is stored masked, as
    plain text, so the signature covers what is stored and no copy holds the card."""
    from .test_recovery import crashed_saga

    @function_tool
    @compensable(undo=lambda ctx: None)
    async def step(n: int) -> int:
        return n

    generate_key(tmp_path / "keys", "ops-key")
    journal = InMemoryJournal()
    sagacity = Sagacity(journal, keyring=tmp_path / "keys")
    sid = await crashed_saga(sagacity.journal)  # written through the keyring's signing view
    await sagacity.recover(sid, agent(scripted(), step))
    entry = await sagacity.resolve(sid, 6, ran=False, resolver="ops", force=True,
                                   reason=f"card {CARD} was never charged")
    assert entry.payload["reason"] == "card **** **** **** 0002 was never charged"
    assert entry.payload["forced"] == {"reason": entry.payload["reason"]}
    absent(await journal.entries(sid), CARD)
    assert all(v.ok for v in await sagacity.verify(sid))
