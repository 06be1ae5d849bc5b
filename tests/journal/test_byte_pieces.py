"""The PostgreSQL append sends an entry's canonical bytes split around ``prev_hash`` and ``seq``
(``backends.postgres.journal.byte_pieces``); the server joins them around the real tail. Joined
around any tail, the pieces must be exactly the bytes the shared append rule seals, whatever the
payload: with the random markers, and by the fallback when a payload happens to hold a marker.
No server needed.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity_agents.backends.postgres import journal as postgres_journal
from sagacity_agents.core.canonical import MAX_SAFE_INTEGER
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.journal import AppendRequest, next_entry
from sagacity_agents.backends.postgres.journal import byte_pieces

NOW = "2026-12-01T00:00:00.000000Z"
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.floats(allow_nan=False, allow_infinity=False), text,
)
payloads = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(text, children, max_size=4)),
    max_leaves=20,
)
tails = st.one_of(
    st.none(),
    st.tuples(st.integers(min_value=1, max_value=10**15), st.text("0123456789abcdef", min_size=64,
                                                                  max_size=64), st.just("INTENT")),
)


def joined(pieces: tuple[bytes, bytes, bytes], tail: tuple[int, str, str] | None) -> bytes:
    head, middle, end = pieces
    seq, prev = (1, "0" * 64) if tail is None else (tail[0] + 1, tail[1])
    return head + prev.encode() + middle + str(seq).encode() + end


@settings(max_examples=500, deadline=None)
@given(payload=payloads, tail=tails, saga=text.filter(bool), tool=st.none() | text)
def test_pieces_joined_around_any_tail_are_the_shared_rules_bytes(payload, tail, saga, tool):
    request = AppendRequest.build(saga, Phase.EXECUTED, write_key="k", tool=tool, call_id="c",
                                  payload=payload)
    assert joined(byte_pieces(request, NOW), tail) == next_entry(request, tail, NOW).canonical


def test_a_payload_holding_the_markers_falls_back_to_splitting_by_difference(monkeypatch):
    """A payload that holds the very markers drawn for its append (by chance, or aimed at a
    predictable generator) is still split right: the split goes to the fallback."""
    marker, seq_marker = "ab" * 32, 123456789012345
    monkeypatch.setattr(postgres_journal._markers, "getrandbits", lambda n: int(marker, 16))
    monkeypatch.setattr(postgres_journal._markers, "randrange", lambda n: seq_marker - 10**14)
    fallback = []
    real = postgres_journal._byte_pieces_by_difference
    monkeypatch.setattr(postgres_journal, "_byte_pieces_by_difference",
                        lambda fields: fallback.append(1) or real(fields))
    for payload in ({"prev_hash": marker}, {"n": seq_marker}, [str(seq_marker), marker]):
        request = AppendRequest.build("s", Phase.INTENT, write_key="k", payload=payload)
        for tail in (None, (41, "f" * 64, "EXECUTED")):
            assert joined(byte_pieces(request, NOW), tail) == next_entry(request, tail, NOW).canonical
    assert len(fallback) == 6
