"""The grammar check of ConcretePlant rewrites (paper A.1): the new span must keep the keyword's role.

Hand-made cases on the small English pipeline: valid substitutions pass, an object noun replaced by a verb, an
attribute that no longer modifies its noun and a relation replaced by an adjective are rejected as "grammar";
with ``rewrite_with_retries`` the rejection is retried and counted under its reason.
"""

import pytest

from concrete_jungle.concreteplant.grammar import GRAMMAR_REASON, GrammarCheck, changed_span, role_ok, span_root
from concrete_jungle.concreteplant.keywords import load_spacy
from concrete_jungle.concreteplant.rewrite import RewriteRequest, RewriteResult, rewrite_with_retries


@pytest.fixture(scope="module")
def nlp():
    return load_spacy()


def _request(caption: str, keyword: str, kind: str) -> RewriteRequest:
    start = caption.index(keyword)
    return RewriteRequest(caption, keyword, start, start + len(keyword), kind, keyword)


def test_changed_span_is_the_replacement():
    cap = "A person wearing a red helmet"
    assert changed_span(cap, "A person wearing a blue helmet", 19, 22) == (19, 23)  # "blue"
    # a/an change: the article is part of the changed span
    cap2 = "A man holding a dog"
    a, b = changed_span(cap2, "A man holding an elephant", 16, 19)
    assert "A man holding an elephant"[a:b] in ("n elephant", "an elephant")
    with pytest.raises(ValueError, match="not inside caption"):
        changed_span(cap, cap, 5, 5)


CASES = [
    # (caption, keyword, type, negative, expected reason)
    ("A dog running in the park", "dog", "object", "A cat running in the park", None),
    ("A woman holding a coffee cup", "coffee cup", "object", "A woman holding a laptop", None),
    ("A woman holding a cup on the table", "cup", "object", "A woman holding a quickly on the table", "grammar"),
    ("A person wearing a red helmet", "red", "attribute", "A person wearing a blue helmet", None),
    ("The sky over the city is cloudy", "cloudy", "attribute", "The sky over the city is clear", None),
    ("A person wearing a red helmet", "red", "attribute", "A person wearing a under helmet", "grammar"),
    ("A cat sitting under a table", "under", "relation", "A cat sitting on a table", None),
    ("A child standing in front of the tree", "in front of", "relation", "A child standing behind the tree", None),
    ("A cat sitting under a table", "under", "relation", "A cat sitting green a table", "grammar"),
]


@pytest.mark.parametrize("caption,keyword,kind,negative,expected", CASES)
def test_hand_made_rewrites(nlp, caption, keyword, kind, negative, expected):
    check = GrammarCheck(nlp)
    assert check([_request(caption, keyword, kind)], [negative]) == [expected]
    assert check.checked == 1 and check.rejected == (expected is not None)


def test_role_rules_on_parsed_spans(nlp):
    doc = nlp("A person wearing a blue helmet")
    root = span_root(doc, 19, 23)
    assert root.text == "blue" and role_ok(root, "attribute") and not role_ok(root, "object")
    assert span_root(doc, 100, 120) is None
    with pytest.raises(ValueError, match="keyword_type"):
        role_ok(root, "colour")


def test_skipped_negatives_and_length_mismatch(nlp):
    check = GrammarCheck(nlp)
    req = _request("A dog running in the park", "dog", "object")
    assert check([req, req], [None, "A cat running in the park"]) == [None, None]
    assert check.checked == 1
    with pytest.raises(ValueError, match="2 requests but 1 negatives"):
        check([req, req], ["x"])


class _Scripted:
    """A rewriter that answers from a script per attempt (a backend of any kind)."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def rewrite(self, requests, attempt=0):
        self.calls.append(len(requests))
        return [RewriteResult(self.answers[attempt], None) for _ in requests]


def test_grammar_rejection_is_retried_and_counted(nlp):
    req = _request("A woman holding a cup on the table", "cup", "object")
    ok = _Scripted({0: "A woman holding a quickly on the table", 1: "A woman holding a plate on the table"})
    results, rejected = rewrite_with_retries(ok, [req], max_attempts=2, grammar=GrammarCheck(nlp))
    assert results[0].negative_caption == "A woman holding a plate on the table" and results[0].attempt == 1
    assert ok.calls == [1, 1] and not rejected
    bad = _Scripted({0: "A woman holding a quickly on the table"})
    results, rejected = rewrite_with_retries(bad, [req], max_attempts=1, grammar=GrammarCheck(nlp))
    assert results[0].negative_caption is None and results[0].reason == GRAMMAR_REASON
    assert rejected == {"grammar": 1}
    # without the check the same answer passes the span validator
    results, _ = rewrite_with_retries(bad, [req], max_attempts=1)
    assert results[0].negative_caption == "A woman holding a quickly on the table"
