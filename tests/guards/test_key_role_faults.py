"""Key roles and validity (core.key_roles, core.authenticity.role_fault): each decision reached
alone, on entries built in memory (the tags themselves are test_entry_tag_faults.py's)."""

from __future__ import annotations

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core.authenticity import ADOPTION_SAGA, role_fault
from sagacity_agents.core.entries import JournalEntry
from sagacity_agents.core.key_roles import KeyRoles, Revocation, Role, read_roles, statement_key, tag_roles

RUN, DECIDE, CHECK, ADMIN = Role.RUN_WRITER, Role.DECISION_MAKER, Role.CHECKPOINT_SIGNER, Role.KEYRING_ADMIN
EXPLICIT = KeyRoles({"w": frozenset({RUN, CHECK}), "d": frozenset({DECIDE})}, None, frozenset({"root"}))
T0, T1, T2 = "2026-01-01T00:00:00.000000Z", "2026-01-02T00:00:00.000000Z", "2026-01-03T00:00:00.000000Z"


def entry(phase, key="w", seq=3, payload=None, saga_id="s") -> JournalEntry:
    return JournalEntry(saga_id, seq, phase, None, None, f"k{seq}", payload if payload is not None else {},
                        T0, "0" * 64, "h", b"", key, "tag")


def signed(key: str, **extra) -> dict:
    return {"signature": {"key_id": key, "time": T0, "signature": "x"}, **extra}


@pytest.mark.parametrize("phase, needed", [
    (Phase.RUN_STARTED, {RUN}), (Phase.INTENT, {RUN}), (Phase.EXECUTED, {RUN}), ("CHECKED", {RUN}),
    ("REQUEST_VOIDED", {RUN}), ("SOMETHING_NEW", {RUN}), (Phase.APPROVED, {DECIDE}),
    (Phase.REJECTED, {DECIDE, RUN}), (Phase.RESOLVED, {DECIDE}), (Phase.KEY_ROLES, {ADMIN}),
    (Phase.KEY_REVOKED, {ADMIN}), (Phase.KEYRING_ADOPTED, {ADMIN, RUN}),
])
def test_the_table_of_which_role_tags_which_phase(phase, needed):
    assert tag_roles(entry(phase)) == needed


def test_a_resolved_carrying_undo_data_is_tagged_by_a_run_writer():
    assert tag_roles(entry(Phase.RESOLVED, payload={"answer": "ran", "undo_data": {}})) == {RUN}
    assert tag_roles(entry(Phase.RESOLVED, payload={"answer": "ran"})) == {DECIDE}
    assert tag_roles(entry(Phase.RESOLVED, payload="garbage")) == {DECIDE}


def test_the_statement_key_is_read_from_decisions_and_resolutions_only():
    assert statement_key(entry(Phase.APPROVED, payload=signed("d"))) == "d"
    assert statement_key(entry(Phase.RESOLVED, payload=signed("d"))) == "d"
    assert statement_key(entry(Phase.EXECUTED, payload=signed("d"))) is None
    assert statement_key(entry(Phase.APPROVED, payload={"signature": {"key_id": 3}})) is None
    assert statement_key(entry(Phase.APPROVED, payload={"signature": "x"})) is None


def test_a_decision_key_never_tags_a_run_entry_and_a_run_key_never_an_approved():
    assert role_fault(entry(Phase.INTENT, "w"), EXPLICIT) is None
    problem = role_fault(entry(Phase.INTENT, "d"), EXPLICIT)
    assert problem.startswith("INTENT tagged by key 'd'") and "run_writer" in problem and "decision_maker" in problem
    assert role_fault(entry("SOMETHING_NEW", "d"), EXPLICIT).startswith("SOMETHING_NEW tagged by key 'd'")
    assert role_fault(entry(Phase.APPROVED, "d", payload=signed("d")), EXPLICIT) is None
    assert "may not sign decisions" in role_fault(entry(Phase.APPROVED, "w", payload=signed("d")), EXPLICIT)
    statement = role_fault(entry(Phase.APPROVED, "d", payload=signed("w")), EXPLICIT)
    assert "its statement signed by key 'w'" in statement
    assert role_fault(entry(Phase.REJECTED, "w"), EXPLICIT) is None  # the run rejects bad arguments itself
    assert role_fault(entry(Phase.RESOLVED, "d", payload=signed("d", undo_data={})), EXPLICIT) is not None
    assert role_fault(entry(Phase.KEY_ROLES, "w"), EXPLICIT) is not None
    assert role_fault(entry(Phase.KEY_ROLES, "root"), EXPLICIT) is None
    assert role_fault(entry(Phase.INTENT, "nobody"), EXPLICIT) is not None


def test_the_default_roles_keep_the_old_rule():
    default = KeyRoles(None, frozenset({"d"}), frozenset({"root"}))
    assert default.roles_of("w") == {RUN, CHECK}
    assert default.roles_of("d") == {RUN, CHECK, DECIDE}
    assert default.roles_of("root") == {ADMIN}
    assert KeyRoles().roles_of("w") == {RUN, CHECK, DECIDE}
    narrowed = KeyRoles({"d": frozenset({DECIDE}), "e": frozenset({DECIDE})}, frozenset({"d"}))
    assert narrowed.roles_of("d") == {DECIDE} and narrowed.roles_of("e") == frozenset()
    assert EXPLICIT.roles_of("root") == {ADMIN} and EXPLICIT.holders(DECIDE, ["w", "d", "x"]) == {"d"}


def test_a_revoked_key_counts_up_to_the_last_checkpoint_before_its_revocation():
    roles = KeyRoles(EXPLICIT.explicit, None, frozenset(), {"w": Revocation(T1, 9, "stolen")})
    checkpoints = [(2, T0), (4, T1), (6, T2)]
    assert roles.boundary("w", checkpoints, False) == 4
    assert roles.boundary("w", [], False) == 0
    assert roles.boundary("w", checkpoints, True) == 9
    assert roles.boundary("d", checkpoints, False) is None
    assert role_fault(entry(Phase.INTENT, "w", seq=4), roles, checkpoints) is None
    late = role_fault(entry(Phase.INTENT, "w", seq=5), roles, checkpoints)
    assert "revoked at" in late and "stolen" in late and "after seq 4" in late
    assert role_fault(entry(Phase.KEY_ROLES, "root", seq=9, saga_id=ADOPTION_SAGA), KeyRoles(
        None, None, frozenset({"root"}), {"root": Revocation(T1, 9, "x")})) is None
    assert role_fault(entry(Phase.KEY_ROLES, "root", seq=10, saga_id=ADOPTION_SAGA), KeyRoles(
        None, None, frozenset({"root"}), {"root": Revocation(T1, 9, "x")})) is not None
    decided = KeyRoles(EXPLICIT.explicit, None, frozenset(), {"d": Revocation(T1, 9, "left")})
    assert "revoked" in role_fault(entry(Phase.APPROVED, "d", seq=5, payload=signed("d")), decided, checkpoints)


def test_a_checkpoint_counts_only_by_a_checkpoint_signer_before_its_revocation():
    roles = KeyRoles(EXPLICIT.explicit, None, frozenset(), {"w": Revocation(T1, 9, "stolen")})
    assert roles.checkpoint_problem("w", T1) is None
    assert "after its revocation" in roles.checkpoint_problem("w", T2)
    assert "may not sign checkpoints" in roles.checkpoint_problem("d", T0)


def event(seq, phase, key, **payload) -> JournalEntry:
    return entry(phase, key, seq=seq, payload=payload, saga_id=ADOPTION_SAGA)


def test_keyring_events_count_only_when_authentic_well_formed_and_by_an_unrevoked_admin():
    events = [
        event(0, Phase.KEYRING_ADOPTED, "root"),
        event(1, Phase.KEY_ROLES, "root", key_id="w", roles=["run_writer"], valid_from=T0, reason=""),
        event(2, Phase.KEY_ROLES, "w", key_id="w", roles=["keyring_admin"], valid_from=T0, reason=""),
        event(3, Phase.KEY_ROLES, "root", key_id="d", roles=["boss"], valid_from=T0, reason=""),
        event(4, Phase.KEY_ROLES, "root", key_id="d", roles=["decision_maker"], valid_from="yesterday"),
        event(5, Phase.KEY_ROLES, "forged", key_id="d", roles=["run_writer"], valid_from=T0),
        event(6, Phase.KEY_REVOKED, "root", key_id="root", revoked_at=T1, reason="rotated"),
        event(7, Phase.KEY_ROLES, "root", key_id="d", roles=["decision_maker"], valid_from=T0),
        event(8, Phase.INTENT, "root"),
    ]
    roles = read_roles(events, frozenset({"root"}), None, lambda e: "bad tag" if e.tag_key == "forged" else None)
    assert roles.roles_of("w") == {RUN} and roles.roles_of("d") == frozenset()
    assert roles.valid_from == {"w": T0} and roles.revoked["root"] == Revocation(T1, 6, "rotated")
    ignored = {int(n.split()[3]) for n in roles.notes}
    assert ignored == {2, 3, 4, 5, 7}, roles.notes
    assert read_roles([], frozenset(), None, lambda e: None).explicit is None
    first_revocation_counts = read_roles(
        [event(1, Phase.KEY_REVOKED, "root", key_id="w", revoked_at=T1, reason="a"),
         event(2, Phase.KEY_REVOKED, "root", key_id="w", revoked_at=T2, reason="b")],
        frozenset({"root"}), None, lambda e: None)
    assert first_revocation_counts.revoked["w"].revoked_at == T1
