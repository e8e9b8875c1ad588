"""The round subset the repository carries (tests/data/) is exactly its members of the
shared v5.0 round, byte for byte."""

from __future__ import annotations

from tests.helpers.round_data import SUBSET


def test_the_carried_subset_is_the_shared_rounds_members(round_v50, round_v50_subset):
    carried = {p.relative_to(round_v50_subset): p.read_bytes() for p in round_v50_subset.rglob("*") if p.is_file()}
    assert len(carried) == 49
    assert all(any(str(path).startswith(member) for member in SUBSET) for path in carried)
    shared = {path: (round_v50 / path).read_bytes() for path in carried}
    assert carried == shared
    # and nothing of those members is left out
    members = [round_v50 / member for member in SUBSET]
    whole = {p.relative_to(round_v50) for m in members for p in [m, *m.rglob("*")] if p.is_file()}
    assert whole == set(carried)
