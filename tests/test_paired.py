"""Paired comparison of per-item verdicts (SE from the discordant shares, exact McNemar) — hand-computed values."""

import math

import pytest

from concrete_jungle.evaluation.paired import paired_comparison

# 10 items over two subsets. A right on 8, B right on 6; only A right: items x1, x2, y3; only B right: y4.
A = {"x": {"0": True, "1": True, "2": True, "3": False}, "y": {"0": True, "1": True, "2": True, "3": True, "4": False,
                                                                "5": True}}
B = {"x": {"0": True, "1": False, "2": False, "3": False}, "y": {"0": True, "1": True, "2": True, "3": False,
                                                                 "4": True, "5": True}}


def test_paired_comparison_by_hand():
    c = paired_comparison(A, B)
    assert c["n"] == 10 and c["only_a"] == 3 and c["only_b"] == 1
    assert c["accuracy_a"] == pytest.approx(0.8) and c["accuracy_b"] == pytest.approx(0.6)
    assert c["delta"] == pytest.approx(0.2)
    # p01 = 0.3, p10 = 0.1: sqrt(0.4 - 0.04) / sqrt(10) = 0.6 / 3.1623 = 0.18974
    assert c["se_paired"] == pytest.approx(math.sqrt(0.36 / 10))
    # exact McNemar on 4 discordant items, 3 vs 1: two-sided binomial p = 2 * P(X <= 1 | 4, 1/2) = 2 * 5/16
    assert c["mcnemar_p"] == pytest.approx(0.625)
    swapped = paired_comparison(B, A)
    assert swapped["delta"] == pytest.approx(-0.2) and swapped["se_paired"] == pytest.approx(c["se_paired"])
    same = paired_comparison(A, A)
    assert same["delta"] == 0 and same["se_paired"] == 0 and same["mcnemar_p"] == 1.0


def test_paired_comparison_rejects_other_items_and_bad_verdicts():
    with pytest.raises(ValueError, match=r"different items \(1 only in A, 0 only in B\)"):
        paired_comparison(A, {"x": {k: v for k, v in B["x"].items() if k != "3"}, "y": B["y"]})
    with pytest.raises(ValueError, match="x/0 is 1, not a bool"):
        paired_comparison({"x": {"0": 1}}, {"x": {"0": True}})
    with pytest.raises(ValueError, match="non-empty"):
        paired_comparison({}, B)


def test_comparison_pairs_of_the_committed_grid():
    from pathlib import Path

    from concrete_jungle.grid import comparison_pairs
    from concrete_jungle.params import load_params

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml",
                         overrides={"train": {"datasets": ["hc", "lc"], "losses": ["infonce"],
                                              "margin_losses": ["cement"], "baselines": ["clip"]}})
    assert comparison_pairs(params) == [
        ("clip", "base"), ("hc-infonce", "base"), ("hc-cement", "base"), ("lc-infonce", "base"),
        ("lc-cement", "base"),
        ("hc-infonce", "clip"), ("hc-cement", "clip"), ("lc-infonce", "clip"), ("lc-cement", "clip"),
        ("hc-cement", "hc-infonce"), ("lc-cement", "lc-infonce"),
        ("hc-infonce", "lc-infonce"), ("hc-cement", "lc-cement"),  # the concreteness effect, per loss
    ]
    typed = load_params(Path(__file__).resolve().parents[1] / "params.yaml",
                        overrides={"concreteplant": {"datasets": ["hc", "lc", "hc_type", "lc_type"]},
                                   "train": {"datasets": ["hc", "lc", "hc_type", "lc_type"], "losses": ["infonce"],
                                             "margin_losses": [], "baselines": []}})
    assert comparison_pairs(typed)[-2:] == [("hc-infonce", "lc-infonce"), ("hc_type-infonce", "lc_type-infonce")]
    no_infonce = load_params(Path(__file__).resolve().parents[1] / "params.yaml",
                             overrides={"train": {"datasets": ["hc"], "losses": [], "baselines": []}})
    assert comparison_pairs(no_infonce) == [("hc-cement", "base")]
