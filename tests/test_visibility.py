"""Edit visibility (concrete_jungle.evaluation.visibility): hand-computed cosines, a probe that finds a value the
features encode and not one they do not, errors."""

import numpy as np
import pytest

from concrete_jungle.evaluation.suite import EmbeddingCache
from concrete_jungle.evaluation.visibility import MIN_PER_CLASS, edit_cosines, edit_visibility, value_probe


def _unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_edit_cosines_by_hand():
    a = _unit([[1, 0], [1, 1]])
    b = _unit([[0, 1], [1, 1]])
    assert edit_cosines(a, b) == pytest.approx([0.0, 1.0])
    with pytest.raises(ValueError, match="shapes differ"):
        edit_cosines(a, b[:1])


def test_value_probe_sees_an_encoded_value_and_not_noise():
    rng = np.random.default_rng(0)
    labels = ["left"] * 30 + ["right"] * 30 + ["above"] * 20 + ["rare"] * (MIN_PER_CLASS - 1)
    centres = {"left": [3, 0, 0], "right": [0, 3, 0], "above": [0, 0, 3], "rare": [1, 1, 1]}
    x = np.array([centres[v] for v in labels], float) + rng.normal(0, 0.5, (len(labels), 3))
    seen = value_probe(x, labels, Cs=[0.1, 1.0], max_iter=500, seed=0)
    assert seen["classes"] == 3 and seen["dropped"] == MIN_PER_CLASS - 1 and seen["n"] == 80
    assert seen["accuracy"] > 0.95 and seen["majority"] == pytest.approx(30 / 80, abs=0.02)
    blind = value_probe(rng.normal(size=(80, 3)), labels[:80], Cs=[0.1, 1.0], max_iter=500, seed=0)
    assert blind["accuracy"] < 0.6  # noise features: near the majority rate (0.375), far from the encoded case
    one = value_probe(x[:30], labels[:30], Cs=[1.0], max_iter=100, seed=0)
    assert "skipped" in one and one["classes"] == 1


def test_edit_visibility_per_type_and_random_pairs():
    # relation edits invisible to the image tower (v' == v), attribute edits orthogonal; captions always differ a bit
    pairs, images, texts = [], {}, {}
    for i in range(20):
        t = "relation" if i % 2 else "attribute"
        v, vn = f"v{i}.png", f"n{i}.png"
        images[v] = _unit([1, i, 0.5])
        images[vn] = images[v] if t == "relation" else _unit(np.cross(images[v], [0, 0, 1]))
        texts[f"t{i}"] = _unit([1, 0, i])
        texts[f"u{i}"] = _unit([1, 0.1, i])
        pairs.append({"anchor_id": str(i), "image": v, "negative_image": vn, "caption": f"t{i}",
                      "negative_caption": f"u{i}", "type": t, "lemma": ("left", "right")[i % 4 // 2]})
    cache = EmbeddingCache(list(images), list(texts), np.array(list(images.values())), np.array(list(texts.values())))
    out = edit_visibility({"hc": pairs}, cache, Cs=[1.0], max_iter=200, seed=0)
    cos = out["cosine"]
    assert cos["relation"]["image"] == pytest.approx(1.0) and cos["relation"]["n"] == 10
    assert cos["attribute"]["image"] == pytest.approx(0.0, abs=1e-12)  # orthogonal edit
    assert 0.99 < cos["attribute"]["text"] < 1.0
    assert cos["random"]["n"] == 20 and cos["random"]["image"] < 1.0
    assert out["probe"]["relation"]["n"] == 10 and "skipped" not in out["probe"]["relation"]
    with pytest.raises(ValueError, match="pair 0 of hc has no valid type / lemma"):
        edit_visibility({"hc": [{**pairs[0], "lemma": None}]}, cache, Cs=[1.0], max_iter=10, seed=0)
