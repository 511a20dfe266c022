"""scripts/advise_rank.py's arithmetic: Spearman's rho with ties, and the full runs' agreement
with each other that bounds what a probe can show (docs/advisor.md)."""

from __future__ import annotations

import pytest

from tests.helpers import script_module


@pytest.fixture(scope="module")
def rank():
    return script_module("advise_rank.py")


def test_spearman_of_same_reversed_and_tied_orders(rank):
    assert rank.ranks([5.0, 9.0, 5.0, 1.0]) == [2.5, 1.0, 2.5, 4.0]
    assert rank.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert rank.spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert rank.spearman([1, 2, 3, 4], [10, 10, 30, 40]) == pytest.approx(0.9486833)  # scipy.stats.spearmanr


def test_full_runs_that_repeat_their_order_agree_and_near_ties_do_not(rank):
    apart = [[1000, 1010, 990], [2000, 2020, 1980], [3000, 2990, 3010]]  # runs: candidates x repetitions
    assert rank.self_agreement(apart) == pytest.approx([1.0, 1.0, 1.0])
    close = [[5000, 5300, 5100], [5200, 5000, 5250], [5100, 5150, 4950]]  # within each other's spread
    assert all(a < 0.8 for a in rank.self_agreement(close))
    assert rank.self_agreement([[1000], [2000]]) == []  # one repetition: nothing to compare
