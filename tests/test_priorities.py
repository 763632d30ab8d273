"""Job priorities: a train stage ranks by the stages its run still has to train from it."""

import pytest

from sdpocl.priorities import BASE_PRIORITY, DATA_PRIORITY, stage_priority, stages_left

CHAINS = [("math",), ("math", "science"), ("math", "science", "tooluse"), ("math", "science", "tooluse", "code")]


def test_stages_left_counts_the_chain_and_its_descendants():
    assert [stages_left(CHAINS, c) for c in CHAINS] == [4, 3, 2, 1]


def test_a_single_domain_run_is_not_a_descendant_of_the_chain():
    chains = CHAINS + [("science",), ("tooluse",)]
    assert stages_left(chains, ("math",)) == 4
    assert stages_left(chains, ("science",)) == 1


def test_priorities_order_base_data_stages():
    stage = [stage_priority(CHAINS, c) for c in CHAINS]
    assert stage == sorted(stage, reverse=True) and len(set(stage)) == 4
    assert BASE_PRIORITY > DATA_PRIORITY > max(stage) > min(stage) > 0
    # the scheduler sums the priorities of the jobs it starts together: the base must outrank the
    # one-core data jobs it displaces, one per core it takes (two; more ranks, more cores)
    assert BASE_PRIORITY > 16 * DATA_PRIORITY


def test_unknown_chain_is_an_error():
    with pytest.raises(ValueError, match="science/math"):
        stages_left(CHAINS, ("science", "math"))
