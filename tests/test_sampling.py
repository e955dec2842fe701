"""Concreteness-aware keyword sampling (paper Sec. 2.2 / A.1): exact probabilities, type rules, COCO order."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from concrete_jungle.concreteplant.keywords import Candidate
from concrete_jungle.concreteplant.sampling import KeywordSampler, within_type_probabilities

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
COCO_CAPTIONS = SHARED / "coco" / "annotations" / "captions_val2017.json"

E54 = math.exp(5) / (math.exp(5) + math.exp(4))  # softmax([5, 4])[0] = 0.7311


def _cand(type_: str, c: float | None, k: int = 0, text: str | None = None) -> Candidate:
    text = text or f"{type_[:3]}{k}"
    return Candidate(text, text, type_, 10 * k, 10 * k + len(text), c)


def test_probabilities_hand_example():
    np.testing.assert_allclose(within_type_probabilities([5, 4, 3], "hc", 2, 1.0), [E54, 1 - E54, 0.0])
    assert E54 == pytest.approx(0.7311, abs=1e-4)
    # lc mirrors: bottom-2 = [4, 3], softmax(-[4, 3]) = [0.2689, 0.7311]
    np.testing.assert_allclose(within_type_probabilities([5, 4, 3], "lc", 2, 1.0), [0.0, 1 - E54, E54])
    # T = 0.5: softmax([10, 8]) = [0.8808, 0.1192]
    np.testing.assert_allclose(
        within_type_probabilities([5, 4, 3], "hc", 2, 0.5), [0.880797, 0.119203, 0.0], atol=1e-6
    )
    np.testing.assert_allclose(within_type_probabilities([5, 4, 3], "wo", 1, 1.0), [1 / 3] * 3)
    # ties at the cut keep caption order: [4, 5, 4] top-2 keeps index 1 and the first 4
    np.testing.assert_allclose(within_type_probabilities([4, 5, 4], "hc", 2, 1.0), [1 - E54, E54, 0.0])
    # a vanishing temperature is greedy, never NaN (the shift comes before the division)
    np.testing.assert_array_equal(within_type_probabilities([5, 4, 3], "hc", 3, 1e-320), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(within_type_probabilities([5, 4, 3], "lc", 3, 1e-320), [0.0, 0.0, 1.0])


@pytest.mark.parametrize("mode,expected", [("hc", [E54, 1 - E54, 0.0]), ("lc", [0.0, 1 - E54, E54])])
def test_empirical_frequencies_match(mode, expected):
    """10,000 seeded draws: binomial sd = sqrt(0.731 * 0.269 / 10000) = 0.0044; tolerance 0.018 ~ 4 sd."""
    cands = [_cand("object", c, k) for k, c in enumerate([5.0, 4.0, 3.0])]
    sampler = KeywordSampler(mode, top_k=2, temperature=1.0, seed=123)
    n = 10000
    counts = Counter(sampler.sample(cands)[0].text for _ in range(n))
    freq = [counts[c.text] / n for c in cands]
    assert freq == pytest.approx(expected, abs=0.018)
    assert counts[cands[2 if mode == "hc" else 0].text] == 0  # outside the cut: never


def test_wo_uniform_empirical():
    cands = [_cand("attribute", c, k) for k, c in enumerate([5.0, 1.2, 3.0, 4.4])]
    sampler = KeywordSampler("wo", top_k=1, temperature=1.0, seed=7)
    counts = Counter(sampler.sample(cands)[0].text for _ in range(10000))  # sd = 0.0043; 4 sd = 0.017
    assert [counts[c.text] / 10000 for c in cands] == pytest.approx([0.25] * 4, abs=0.017)


def test_relation_priority():
    cands = [_cand("attribute", 5.0, 0), _cand("object", 5.0, 1), _cand("relation", 1.5, 2)]
    for mode in ("hc", "lc", "wo"):
        sampler = KeywordSampler(mode, 3, 1.0, seed=0)
        picks = {sampler.sample(cands)[0].type for _ in range(50)}
        assert picks == {"relation"}
        assert sampler.type_counts == Counter({"relation": 50})
    # an unrated relation is not eligible
    cands[2] = _cand("relation", None, 2)
    assert KeywordSampler("hc", 3, 1.0, 0).sample(cands)[0].type in {"attribute", "object"}


def test_quota_balances_when_both_available():
    cands = [_cand("attribute", 4.0, 0), _cand("object", 4.9, 1)]
    sampler = KeywordSampler("hc", 2, 1.0, seed=3)
    for step in range(1000):
        sampler.sample(cands)
        assert abs(sampler.type_counts["attribute"] - sampler.type_counts["object"]) <= 1, step
    assert sampler.type_counts == Counter({"attribute": 500, "object": 500})


def test_quota_repays_deficit():
    """10 object-only anchors, then 10 with both types: the deficit (10 vs 0) makes all 10 attributes."""
    sampler = KeywordSampler("hc", 2, 1.0, seed=0)
    only_obj = [_cand("object", 4.9, 0)]
    both = [_cand("attribute", 4.0, 0), _cand("object", 4.9, 1)]
    for _ in range(10):
        sampler.sample(only_obj)
    picks = [sampler.sample(both)[0].type for _ in range(10)]
    assert picks == ["attribute"] * 10
    assert sampler.type_counts == Counter({"object": 10, "attribute": 10})


def test_skip_reasons_counted():
    sampler = KeywordSampler("hc", 2, 1.0, seed=0)
    assert sampler.sample([]) == (None, "no_candidate")
    assert sampler.sample([_cand("object", None)]) == (None, "no_rated_candidate")
    assert sampler.sample([_cand("object", None)]) == (None, "no_rated_candidate")
    assert sampler.skip_counts == Counter({"no_rated_candidate": 2, "no_candidate": 1})
    with pytest.raises(TypeError, match=r"candidates\[0\]"):
        sampler.sample(["dog"])  # type: ignore[list-item]


def test_determinism():
    cands = [_cand("object", c, k) for k, c in enumerate([4.9, 4.5, 4.1, 3.0])]
    a = KeywordSampler("hc", 3, 1.0, seed=11)
    b = KeywordSampler("hc", 3, 1.0, seed=11)
    c = KeywordSampler("hc", 3, 1.0, seed=12)
    seq_a = [a.sample(cands)[0].text for _ in range(200)]
    assert seq_a == [b.sample(cands)[0].text for _ in range(200)]
    assert seq_a != [c.sample(cands)[0].text for _ in range(200)]


def test_global_cut():
    # top-2 over all = object 4.9 and attribute 4.6; the relation (3.0) is outside the cut, so no priority.
    cands = [_cand("relation", 3.0, 0), _cand("object", 4.9, 1), _cand("attribute", 4.6, 2)]
    sampler = KeywordSampler("hc", 2, 1.0, seed=0, cut="global")
    picks = Counter(sampler.sample(cands)[0].type for _ in range(100))
    assert set(picks) == {"object", "attribute"} and abs(picks["object"] - picks["attribute"]) <= 1
    # lc: bottom-2 = relation 3.0 and attribute 4.6 -> relation priority
    lc = KeywordSampler("lc", 2, 1.0, seed=0, cut="global")
    assert {lc.sample(cands)[0].type for _ in range(20)} == {"relation"}


def test_bad_parameters():
    with pytest.raises(ValueError, match="mode"):
        KeywordSampler("high", 2, 1.0, 0)
    with pytest.raises(ValueError, match="top_k"):
        KeywordSampler("hc", 0, 1.0, 0)
    with pytest.raises(ValueError, match="temperature"):
        KeywordSampler("hc", 2, 0.0, 0)
    with pytest.raises(ValueError, match="cut"):
        KeywordSampler("hc", 2, 1.0, 0, cut="both")
    with pytest.raises(ValueError, match="non-empty"):
        within_type_probabilities([], "hc", 2, 1.0)
    with pytest.raises(ValueError, match="finite"):
        within_type_probabilities([4.0, float("nan")], "hc", 2, 1.0)


def _stream() -> list[list[Candidate]]:
    """24 synthetic anchors with 1-5 candidates of mixed types and concreteness 1.5-4.9."""
    types = ("attribute", "object", "object", "relation", "attribute", "object")
    out = []
    for a in range(24):
        out.append([
            _cand(types[(a + k) % 6] if a % 4 else ("object" if k % 2 else "attribute"),
                  round(1.5 + ((a * 13 + k * 29) % 35) / 10, 2), k)
            for k in range(1 + (a * 7) % 5)
        ])
    return out


#: Picks of the sampler before its speed-up (numpy ``Generator.choice``), K = 2, T = 0.5, seed 5, on ``_stream``.
EXPECTED_PICKS = {
    ("type", "hc"): "att0 rel2 rel1 rel0 obj3 obj0 att0 rel2 obj1 rel0 att0 obj2 att4 obj1 rel1 rel0 att0 rel4 "
    "obj1 rel2 att0 rel0 obj4 att1",
    ("type", "lc"): "att0 rel2 rel1 rel0 obj1 obj0 att0 rel2 obj1 rel0 att0 obj0 att2 obj1 rel1 rel0 att2 rel4 "
    "obj1 rel2 att0 rel0 obj1 att1",
    ("type", "wo"): "att0 rel2 rel1 rel0 obj1 obj0 att0 rel2 obj1 rel0 att0 obj0 att2 obj1 rel1 rel0 att0 rel4 "
    "obj1 rel2 att0 rel0 obj4 att1",
    ("global", "hc"): "att0 obj1 rel1 rel0 obj3 obj0 att0 obj0 att0 rel0 att0 obj2 att4 obj1 att2 rel0 obj1 obj2 "
    "att0 rel2 att0 rel0 obj3 att1",
    ("global", "lc"): "att0 rel2 obj3 rel0 obj1 obj0 att0 rel2 att0 obj2 att0 obj0 att2 obj1 rel1 rel0 att2 obj0 "
    "att0 obj0 att0 obj2 att0 obj0",
    ("global", "wo"): "att0 rel2 att4 rel0 obj3 obj0 obj1 rel2 obj1 att1 att0 obj2 att0 obj0 rel1 rel0 obj1 obj2 "
    "att0 obj0 att0 rel0 att0 obj0",
}


@pytest.mark.parametrize("cut,mode", sorted(EXPECTED_PICKS))
def test_picks_unchanged_by_speed_up(cut, mode):
    sampler = KeywordSampler(mode, top_k=2, temperature=0.5, seed=5, cut=cut)
    assert " ".join(sampler.sample(c)[0].text for c in _stream()) == EXPECTED_PICKS[(cut, mode)]


@pytest.mark.parametrize("mode", ["hc", "lc", "wo"])
def test_draw_is_numpy_choice(mode):
    """``_draw`` returns ``Generator.choice(n, p=p)``'s index and leaves the generator in the same state."""
    gen = np.random.default_rng(99)
    sampler = KeywordSampler(mode, top_k=3, temperature=0.7, seed=2024)
    reference = np.random.default_rng(2024)
    for _ in range(3000):
        n = int(gen.integers(1, 7))
        pool = [_cand("object", float(c), k) for k, c in enumerate(gen.uniform(1.0, 5.0, n).round(2))]
        p = within_type_probabilities([c.concreteness for c in pool], mode, 3, 0.7)
        assert sampler._draw(pool) == int(reference.choice(n, p=p))
    assert sampler._rng.random() == reference.random()


@pytest.fixture(scope="module")
def coco_candidates():
    """Candidates of the 500 longest COCO val2017 captions (parsed once for the module)."""
    if not COCO_CAPTIONS.exists():
        pytest.skip(f"COCO captions absent ({COCO_CAPTIONS}); ../shared/data is not beside the repo")
    from concrete_jungle.concreteplant.keywords import load_spacy, mine_keywords

    try:
        nlp = load_spacy()
    except OSError as err:
        pytest.skip(f"spaCy pipeline not installed: {err}")
    caps = [a["caption"].strip() for a in json.loads(COCO_CAPTIONS.read_text())["annotations"]]
    caps = sorted(caps, key=lambda c: (-len(c.split()), -len(c), c))[:500]
    return mine_keywords(caps, nlp=nlp)


@pytest.mark.parametrize("cut", ["type", "global"])
def test_coco_mean_concreteness_order(coco_candidates, cut):
    """On the 500 longest COCO val2017 captions: mean c_i of lc < wo < hc (paper Table 1 ordering)."""
    means = {}
    for mode in ("hc", "lc", "wo"):
        sampler = KeywordSampler(mode, top_k=3, temperature=1.0, seed=0, cut=cut)
        picks = [sampler.sample(c)[0] for c in coco_candidates]
        means[mode] = float(np.mean([p.concreteness for p in picks if p is not None]))
    print(cut, means)
    assert means["lc"] + 0.05 < means["wo"] < means["hc"] - 0.05, means
