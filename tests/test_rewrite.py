"""Caption rewriting: lexical substitutions per type, determinism, the validator, the A.2 prompt."""

from __future__ import annotations

import pytest

from concrete_jungle.concreteplant.lexical import (
    ATTRIBUTE_KINDS,
    OBJECT_KINDS,
    LexicalRewriter,
    indefinite_article,
    pluralize,
)
from concrete_jungle.concreteplant.rewrite import (
    A2_EXAMPLES,
    RewriteRequest,
    RewriteResult,
    Rewriter,
    build_prompt,
    validate_rewrite,
)


def req(caption: str, keyword: str, type_: str, lemma: str | None = None, occurrence: int = 0) -> RewriteRequest:
    start = -1
    for _ in range(occurrence + 1):
        start = caption.index(keyword, start + 1)
    return RewriteRequest(caption, keyword, start, start + len(keyword), type_, lemma or keyword.lower())


def one(rw: LexicalRewriter, r: RewriteRequest) -> RewriteResult:
    (res,) = rw.rewrite([r])
    return res


# -- deterministic substitutions (a single opposite) ---------------------------------------------------
@pytest.mark.parametrize(
    "caption,keyword,type_,expected",
    [
        ("A lamp placed to the left of the sofa", "to the left of", "relation",
         "A lamp placed to the right of the sofa"),
        ("A cat sitting under a table", "under", "relation", "A cat sitting on a table"),
        ("A child standing in front of the tree", "in front of", "relation", "A child standing behind the tree"),
        ("A bird flying above the sea.", "above", "relation", "A bird flying below the sea."),
        ("A dog sleeping inside a box", "inside", "relation", "A dog sleeping outside a box"),
        ("A large red circle", "large", "attribute", "A small red circle"),
        ("An empty glass on a desk", "empty", "attribute", "A full glass on a desk"),  # article an -> a
        ("A tall tree behind a house", "tall", "attribute", "A short tree behind a house"),
        ("The cloudy sky over the city", "cloudy", "attribute", None),  # clear or sunny
        ("A man holding a baby", "man", "object", "A woman holding a baby"),
        ("Two men riding horses", "men", "object", "Two women riding horses"),  # plural kept
        ("Girl with a kite", "Girl", "object", "Boy with a kite"),  # case of first letter kept
    ],
)
def test_opposites(caption, keyword, type_, expected):
    res = one(LexicalRewriter(seed=0), req(caption, keyword, type_))
    assert res.reason is None
    if expected is None:
        assert res.negative_caption in {"The clear sky over the city", "The sunny sky over the city"}
    else:
        assert res.negative_caption == expected


# -- same-kind substitutions ---------------------------------------------------------------------------
def test_colour_material_number_shape():
    rw = LexicalRewriter(seed=0)
    cases = [
        ("A person wearing a red helmet", "red", "colour"),
        ("A wooden boat floating on the water", "wooden", "material"),
        ("Three dogs on a couch", "Three", "number"),
    ]
    for caption, kw, kind in cases:
        r = req(caption, kw, "attribute")
        neg = one(rw, r).negative_caption
        word = neg.removesuffix(caption[r.end :]).split()[-1]
        assert word.lower() in ATTRIBUTE_KINDS[kind] and word.lower() != kw.lower(), (caption, neg)
        assert validate_rewrite(caption, r.start, r.end, neg) is None
    # numbers keep their style: digits stay digits, "one" has no substitute (noun number would break)
    r = req("There are 3 cats", "3", "attribute")
    assert one(rw, r).negative_caption[-6:-5].isdigit()
    assert one(rw, req("One cat on a bed", "One", "attribute")) == RewriteResult(None, "no_substitute")


def test_objects_same_kind():
    rw = LexicalRewriter(seed=0)
    for caption, kw, kind in [
        ("A dog running in the park", "dog", "animal"),
        ("A car driving on the highway", "car", "vehicle"),
        ("A car driving on the highway", "highway", "ground"),
        ("A woman holding a coffee cup", "coffee cup", "kitchenware"),
        ("A red circle left of a blue triangle", "triangle", "shape"),
        ("A slice of pizza on a plate", "pizza", "food"),
        ("A cat on a chair", "chair", "furniture"),
    ]:
        r = req(caption, kw, "object")
        neg = one(rw, r).negative_caption
        prefix_len = len(neg) - len(caption[r.end :])
        head = neg[:prefix_len]
        word = next(w for w in sorted(OBJECT_KINDS[kind], key=len, reverse=True) if head.endswith(w))
        assert word != kw and neg.endswith(caption[r.end :]), (caption, neg)
    # plural objects stay plural
    neg = one(rw, req("Two dogs on the grass", "dogs", "object")).negative_caption
    assert neg.split()[1] in {pluralize(a) for a in OBJECT_KINDS["animal"]} and neg.split()[1] != "dogs"


def test_article_fixed():
    rw = LexicalRewriter(seed=0, vocabulary={"animal": ["dog", "elephant"]})
    assert one(rw, req("A dog in a field", "dog", "object")).negative_caption == "An elephant in a field"
    assert one(rw, req("an elephant in a field", "elephant", "object")).negative_caption == "a dog in a field"
    assert indefinite_article("umbrella") == "an" and indefinite_article("unicorn") == "a"
    assert indefinite_article("hour") == "an" and indefinite_article("8") == "an"


def test_interaction_verbs_keep_form():
    rw = LexicalRewriter(seed=0)
    neg = one(rw, req("A woman holding a coffee cup", "holding", "relation")).negative_caption
    assert neg in {"A woman throwing a coffee cup", "A woman dropping a coffee cup", "A woman carrying a coffee cup"}
    neg = one(rw, req("A man rides a horse", "rides", "relation")).negative_caption
    assert neg in {"A man feeds a horse", "A man pets a horse", "A man walks a horse", "A man pushes a horse"}


def test_unsupported_keyword():
    rw = LexicalRewriter(seed=0)
    # abstract nouns and unknown prepositions: no list and no WordNet substitute (sense over coverage)
    assert one(rw, req("A view of the area", "area", "object")) == RewriteResult(None, "no_substitute")
    assert one(rw, req("A cat among two dogs", "among", "relation")) == RewriteResult(None, "no_substitute")
    # "between" has opposites now: "in front of" / "behind", one per attempt
    r = req("A cat between two dogs", "between", "relation")
    got = {rw.rewrite([r], attempt=k)[0].negative_caption for k in (0, 1)}
    assert got == {"A cat in front of two dogs", "A cat behind two dogs"}
    assert rw.rewrite([r], attempt=2)[0] == RewriteResult(None, "no_substitute")


def test_vocabulary_restriction():
    vocab = {
        "size": ["large", "small"],
        "colour": ["red", "green", "blue"],
        "material": ["metal", "rubber"],
        "shape": ["circle", "square", "triangle"],
        "relation": ["to the left of", "to the right of", "above", "below"],
    }
    rw = LexicalRewriter(seed=5, vocabulary=vocab)
    caption = "A large red metal circle to the left of a small blue rubber square"
    got = {}
    for kw, type_ in [("large", "attribute"), ("red", "attribute"), ("metal", "attribute"),
                      ("circle", "object"), ("to the left of", "relation")]:
        got[kw] = one(rw, req(caption, kw, type_)).negative_caption
    assert got["large"] == "A small red metal circle to the left of a small blue rubber square"
    assert got["metal"] == "A large red rubber circle to the left of a small blue rubber square"
    assert got["to the left of"] == "A large red metal circle to the right of a small blue rubber square"
    assert got["red"] in {caption.replace("red", c, 1) for c in ("green", "blue")}
    assert got["circle"] in {caption.replace("circle", s, 1) for s in ("square", "triangle")}
    # outside the vocabulary: nothing, even if the built-in lists know it
    assert one(rw, req("A yellow circle", "yellow", "attribute")).reason == "no_substitute"
    assert one(rw, req("A ball above a box", "above", "relation")).negative_caption == "A ball below a box"
    # relation whose opposite is not in the vocabulary: another relation of the list
    rw2 = LexicalRewriter(seed=0, vocabulary={"relation": ["above", "to the left of"]})
    assert one(rw2, req("A ball above a box", "above", "relation")).negative_caption == "A ball to the left of a box"
    with pytest.raises(ValueError, match="listed under"):
        LexicalRewriter(vocabulary={"colour": ["red"], "shape": ["red"]})


def test_determinism_and_order_independence():
    reqs = [
        req("A person wearing a red helmet", "red", "attribute"),
        req("A dog running in the park", "dog", "object"),
        req("A wooden boat floating on the water", "wooden", "attribute"),
    ]
    a = LexicalRewriter(seed=1).rewrite(reqs)
    assert a == LexicalRewriter(seed=1).rewrite(reqs)
    assert LexicalRewriter(seed=1).rewrite(reqs[::-1]) == a[::-1]
    outs = {tuple(r.negative_caption for r in LexicalRewriter(seed=s).rewrite(reqs)) for s in range(10)}
    assert len(outs) > 1  # the seed matters
    assert isinstance(LexicalRewriter(), Rewriter)


def test_request_validation():
    with pytest.raises(ValueError, match="keyword"):
        RewriteRequest("A red car", "blue", 2, 5, "attribute", "blue")
    with pytest.raises(ValueError, match="span"):
        RewriteRequest("A red car", "red", 2, 50, "attribute", "red")
    with pytest.raises(ValueError, match="type"):
        RewriteRequest("A red car", "red", 2, 5, "colour", "red")
    with pytest.raises(TypeError, match=r"requests\[0\]"):
        LexicalRewriter().rewrite(["A red car"])  # type: ignore[list-item]


# -- validator --------------------------------------------------------------------------------------------
CAP = "A person wearing a red helmet."
S, E = CAP.index("red"), CAP.index("red") + 3


@pytest.mark.parametrize(
    "negative,verdict",
    [
        ("A person wearing a blue helmet.", None),
        ("a person wearing a blue helmet", None),  # case and final period ignored
        ("  A person   wearing a blue helmet. ", None),  # whitespace runs ignored
        ("A person wearing an orange helmet.", None),  # adjacent article may change
        ("A person wearing a dark blue helmet.", None),  # multi-word replacement inside the span
        (None, "empty"),
        ("   ", "empty"),
        ("A person wearing a blue helmet.\nA person wearing a green helmet.", "multi_line"),
        ("A person wearing a red helmet", "unchanged"),
        ("A PERSON WEARING A RED HELMET.", "unchanged"),
        ("A person holding a blue helmet.", "outside_keyword_span"),
        ("A person wearing the blue helmet.", "outside_keyword_span"),  # non-article change before span
        ("A person wearing a blue hat.", "outside_keyword_span"),
        ("A person wearing a helmet.", "outside_keyword_span"),  # deletion
        ("Output: A person wearing a blue helmet.", "outside_keyword_span"),
    ],
)
def test_validator_verdicts(negative, verdict):
    assert validate_rewrite(CAP, S, E, negative) == verdict


def test_validator_bad_span():
    with pytest.raises(ValueError, match="span"):
        validate_rewrite(CAP, 5, 5, "x")


# -- A.2 prompt ------------------------------------------------------------------------------------------
def test_prompt_uses_the_type_example_set():
    p = build_prompt("A man riding a red bike", "red", "attribute", "hc")
    assert "Input: A wooden boat floating on the water, Keyword: wooden, Output: A plastic boat floating on the water." in p
    assert "Input: The cloudy sky over the city, Keyword: cloudy, Output: The clear sky over the city." in p
    assert "A cat sitting under a table" not in p  # relation set absent
    assert p.startswith("Task: You are an expert data engineer.")
    assert p.endswith("Input: A man riding a red bike Keyword: red Output:")
    # D_wo uses the "without considering concreteness" set whatever the type
    w = build_prompt("A man riding a red bike", "red", "attribute", "wo")
    assert "A wooden boat" not in w and "Keyword: highway, Output: A car driving on the grass." in w
    assert "Keyword: front, Output: A child standing behind the tree." in w
    assert [len(v) for v in A2_EXAMPLES.values()] == [3, 3, 3, 3]
    with pytest.raises(ValueError, match="dataset"):
        build_prompt("A red car", "red", "attribute", "xx")
    with pytest.raises(ValueError, match="type"):
        build_prompt("A red car", "red", "colour", "hc")


def test_word_lists_unambiguous_within_a_type():
    from concrete_jungle.concreteplant.lexical import RELATION_KINDS

    for kinds in (ATTRIBUTE_KINDS, RELATION_KINDS, OBJECT_KINDS):
        words = [w for ws in kinds.values() for w in ws]
        assert len(words) == len(set(words)), sorted(w for w in set(words) if words.count(w) > 1)


def test_vocabulary_rewrites_spatial_phrase_to_its_opposite_phrase():
    vocab = {"relation": ["left", "right", "above", "below", "next"], "colour": ["red", "blue"]}
    rw = LexicalRewriter(seed=0, vocabulary=vocab)
    cap = "a red circle to the left of a blue square"
    out = rw.rewrite([RewriteRequest(cap, "to the left of", 13, 27, "relation", "left")])[0]
    assert out.negative_caption == "a red circle to the right of a blue square"
    # "next to" has no opposite phrase: counted as no_substitute, never replaced by an ungrammatical word
    cap2 = "a red circle next to a blue square"
    assert rw.rewrite([RewriteRequest(cap2, "next to", 13, 20, "relation", "next")])[0].reason == "no_substitute"


@pytest.mark.parametrize(
    "caption, span, output, reason",
    [
        ("a red car", (2, 5), "an red car", "keyword_unchanged"),  # only the article changed
        ("a red car", (6, 9), "a red car!", "keyword_unchanged"),  # punctuation is not a rewrite
        ("a cat on a mat", (2, 5), "a a cat on a mat", "outside_keyword_span"),  # doubled article
        ("a red car", (2, 5), "an orange car", None),
    ],
)
def test_validator_rejects_rewrites_that_keep_the_keyword(caption, span, output, reason):
    assert validate_rewrite(caption, span[0], span[1], output) == reason
