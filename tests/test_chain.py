import re

import pytest

from sdpocl.chain import CHAIN_REGEX, chain_str, parent_chain, parse_chain, stage_dir, state_dir


def test_parse_and_parent():
    assert parse_chain("math/science") == ("math", "science")
    assert parent_chain(("math", "science")) == ("math",)
    assert parent_chain(("math",)) is None
    assert chain_str(("math", "science", "tooluse")) == "math/science/tooluse"


def test_stage_and_state_dirs_are_disjoint():
    assert stage_dir("results", "grpo_s0", ("math", "science")) == "results/runs/grpo_s0/math/science"
    assert state_dir("results", "grpo_s0", "math/science") == "results/state/grpo_s0/math+science"


@pytest.mark.parametrize("bad", ["", "math/biology", "math/math"])
def test_bad_chains(bad):
    with pytest.raises(ValueError):
        parse_chain(bad)


def test_wildcard_regex():
    rx = re.compile(f"^{CHAIN_REGEX}$")
    assert rx.match("math/science/tooluse/code")
    assert rx.match("science")
    assert not rx.match("math/")
    assert not rx.match("math/science/model")
