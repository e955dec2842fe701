"""Visual concreteness (Hessel et al. 2018) on a hand-made embedding with known neighbours."""

import math

import numpy as np
import pytest

from concrete_jungle.visual_concreteness import to_rating_scale, visual_concreteness, word_images


def _two_clusters():
    angles = [0.0, 0.1, 0.2, math.pi / 2, math.pi / 2 + 0.1, math.pi / 2 + 0.2]  # images 0-2 and 3-5 alike
    feats = np.array([[math.cos(a), math.sin(a)] for a in angles])
    words = [{"dog", "idea", "ball"}, {"dog", "ball"}, {"dog"}, {"idea", "ball"}, set(), set()]
    return feats, words


def test_scores_by_hand():
    feats, words = _two_clusters()
    s = visual_concreteness(feats, words, k=2, min_images=2)
    # dog: every image's 2 neighbours are dog images -> overlap 1, chance (3-1)/(6-1) = 0.4
    assert s["dog"] == pytest.approx(2.5)
    # idea in images 0 and 3 (different clusters): no neighbour shares it
    assert s["idea"] == 0.0
    # ball in 0, 1, 3: overlaps 1/2, 1/2, 0 -> 1/3 over chance 0.4
    assert s["ball"] == pytest.approx((1 / 3) / 0.4)
    assert "dog" not in visual_concreteness(feats, words, k=2, min_images=4)


def test_rating_scale_is_a_quantile_map():
    scores = {"dog": 2.5, "ball": 5 / 6, "idea": 0.0, "zzz": 5 / 3}
    out = to_rating_scale(scores, {"dog": 4.9, "ball": 5.0, "idea": 1.6})
    assert out["idea"] == 1.6 and out["ball"] == 4.9 and out["dog"] == 5.0  # visual order, Brysbaert values
    assert out["zzz"] == pytest.approx(4.95)  # quantile 0.75 of the rated scores -> between 4.9 and 5.0
    with pytest.raises(ValueError, match="need at least 2"):
        to_rating_scale({"dog": 1.0}, {"dog": 4.9})
    with pytest.raises(ValueError, match="'dog'"):
        to_rating_scale({"dog": float("nan"), "ball": 1.0}, {"dog": 4.9, "ball": 5.0})


def test_tied_scores_get_one_rating_whatever_their_spelling():
    # a and b tie: mean rank 1.5 of 3 -> quantile 0.25 -> halfway between the sorted targets 1.5 and 3.0
    out = to_rating_scale({"b": 1.0, "a": 1.0, "c": 2.0, "u": 1.0}, {"a": 1.5, "b": 3.0, "c": 4.0})
    assert out["a"] == out["b"] == pytest.approx(2.25) and out["c"] == 4.0
    assert out["u"] == pytest.approx(2.25)  # unrated, tied with a and b


def test_neighbour_ties_go_to_the_lower_index():
    from concrete_jungle.visual_concreteness import _neighbours

    feats = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [-1.0, 0.0]])
    nn = _neighbours(feats, 2, block=2)  # rows 1-3 coincide; row 0 is equally far from 1, 2, 3
    assert nn.tolist() == [[1, 2], [2, 3], [1, 3], [1, 2], [1, 2]]


def test_bad_inputs_are_named():
    feats, words = _two_clusters()
    with pytest.raises(ValueError, match="L2-normalised"):
        visual_concreteness(feats * 2, words, k=2)
    with pytest.raises(ValueError, match="k=6"):
        visual_concreteness(feats, words, k=6)
    with pytest.raises(ValueError, match="one row per image"):
        visual_concreteness(feats[:5], words, k=2)
    with pytest.raises(TypeError, match="set of words"):
        word_images(["a dog"])
