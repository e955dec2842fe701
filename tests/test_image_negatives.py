"""Tests for RetrievalNegatives: TF-IDF retrieval of hard negative images (anchor excluded, deterministic ties)."""

import math

import pytest

from concrete_jungle.concreteplant.image_negatives import RetrievalNegatives

TOY = [
    {"id": "dog", "image": "img/dog.jpg", "captions": ["a dog running on the grass", "a brown dog in a park"]},
    {"id": "cat", "image": "img/cat.jpg", "captions": ["a cat sleeping on a sofa", "a grey cat on a couch"]},
    {"id": "car", "image": "img/car.jpg", "captions": ["a red car parked on the street", "a car on a city street"]},
    {"id": "bike", "image": "img/bike.jpg", "captions": ["a man riding a bicycle", "a person on a bike on the road"]},
]


def test_obvious_answers_on_toy_corpus():
    r = RetrievalNegatives(TOY)
    got = r.find(
        ["a cat running on the grass", "a dog sleeping on a sofa", "a red bicycle", "a man riding a car"],
        ["dog", "cat", "bike", "bike"],
    )
    assert got == ["img/cat.jpg", "img/dog.jpg", "img/car.jpg", "img/car.jpg"]


def test_anchor_image_is_never_returned():
    r = RetrievalNegatives(TOY)
    # the query is the dog anchor's own caption: the dog image would score 1-ish, but it is excluded
    assert r.find(["a dog running on the grass"], ["dog"]) != ["img/dog.jpg"]
    # a second record with the anchor's image path is excluded too
    r = RetrievalNegatives(TOY + [{"id": "dog2", "image": "img/dog.jpg", "captions": ["a dog"]}])
    assert r.find(["a brown dog"], ["dog"]) != ["img/dog.jpg"]


def test_hand_computed_cosine_and_tie_break():
    corpus = [
        {"id": "A", "image": "a.png", "captions": ["red car"]},
        {"id": "B", "image": "b.png", "captions": ["blue car"]},
        {"id": "C", "image": "c.png", "captions": ["green bus"]},
    ]
    r = RetrievalNegatives(corpus)
    # smooth idf over 3 documents: df=1 -> ln(4/2)+1, df=2 ("car") -> ln(4/3)+1
    rare, car = math.log(2) + 1, math.log(4 / 3) + 1
    # "blue car" vs A = {red, car, "red car"}: only "car" is shared
    expected = car**2 / (2 * rare**2 + car**2)
    paths, scores = r.find_with_scores(["blue car"], ["B"])
    assert paths == ["a.png"]
    assert scores[0] == pytest.approx(expected, abs=1e-12)
    assert scores[0] == pytest.approx(0.224325, abs=1e-6)
    # no shared n-gram with any eligible image -> score 0, first eligible image in corpus order
    paths, scores = r.find_with_scores(["zebra", "zebra"], ["A", "B"])
    assert paths == ["b.png", "a.png"] and scores.tolist() == [0.0, 0.0]
    # an exact tie between A and B (both share one unigram with the query) goes to A, the first
    paths, scores = r.find_with_scores(["red blue"], ["C"])
    assert paths == ["a.png"]
    assert scores[0] == pytest.approx(rare * rare / (math.sqrt(2) * rare * math.sqrt(2 * rare**2 + car**2)))


def test_errors():
    with pytest.raises(ValueError, match="at least 2 images"):
        RetrievalNegatives(TOY[:1])
    with pytest.raises(ValueError, match="duplicate record ids"):
        RetrievalNegatives([TOY[0], TOY[0]])
    with pytest.raises(ValueError, match="non-empty list of caption strings"):
        RetrievalNegatives([TOY[0], {"id": "x", "image": "x.jpg", "captions": []}])
    r = RetrievalNegatives(TOY)
    with pytest.raises(ValueError, match="differ in length"):
        r.find(["a cat"], ["dog", "cat"])
    with pytest.raises(KeyError, match="'horse'"):
        r.find(["a cat"], ["horse"])
    with pytest.raises(TypeError, match="not a single string"):
        r.find("a cat", ["dog"])
