"""kubectl-style label selector text, compiled by policies.vocabulary.selectors."""

from __future__ import annotations

import pytest

from webhook.label_selector import equality_labels, looks_like_selector, parse_label_selector

LABELS = {"pool": "train", "nvidia.com/gpu.family": "hopper", "zone": "a"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("pool=train", True),
        ("pool==train", True),
        ("pool!=train", False),
        ("pool=infer", False),
        ("nvidia.com/gpu.family in (hopper, ampere)", True),
        ("nvidia.com/gpu.family notin (hopper)", False),
        ("pool=train,zone in (a,b),nvidia.com/gpu.family", True),
        ("!spot", True),
        ("zone,!pool", False),
        ("pool=", False),
    ],
)
def test_selector_text_matches_like_kubectl(text: str, matches: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize("text", ["pool in (a", "pool=a,,zone=b", "pool in a,b)", "=a", "a=b=c"])
def test_malformed_selectors_say_so(text: str) -> None:
    with pytest.raises(ValueError, match="label selector"):
        parse_label_selector(text)


def test_names_and_selectors_are_told_apart() -> None:
    assert not looks_like_selector("dgx-h100-01,dgx-h100-02")
    assert looks_like_selector("pool=train")
    assert looks_like_selector("zone in (a)")
    assert looks_like_selector("!spot")


def test_equality_parts_become_a_node_selector() -> None:
    assert equality_labels("pool=train,zone in (a),family in (x,y),gpu!=t4") == {"pool": "train", "zone": "a"}
