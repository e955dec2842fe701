"""Cleaning and validating LLM rewrites (paper Sec. 2.2 f_cap, A.2), and the retry loop that re-asks rejections."""

from __future__ import annotations

from collections import Counter

import pytest

from concrete_jungle.concreteplant.rewrite import (
    REJECTION_REASONS,
    RewriteRequest,
    RewriteResult,
    Rewriter,
    clean_generation,
    prompt_keyword,
    request_prompt,
    retry_seed,
    rewrite_with_retries,
)


def req(caption: str, keyword: str, type_: str = "attribute", lemma: str | None = None) -> RewriteRequest:
    start = caption.index(keyword)
    return RewriteRequest(caption, keyword, start, start + len(keyword), type_, lemma or keyword.lower())


class Scripted:
    """A rewriter answering from a script: ``script[caption][attempt]`` is a str (the generation), ``None``
    (a refusal with reason ``"no_substitute"``) or ``("truncated", text)``. Records every call."""

    def __init__(self, script: dict[str, list]):
        self.script = script
        self.calls: list[tuple[int, list[str]]] = []

    def rewrite(self, requests: list[RewriteRequest], attempt: int = 0) -> list[RewriteResult]:
        self.calls.append((attempt, [r.caption for r in requests]))
        out = []
        for r in requests:
            answer = self.script[r.caption][attempt]
            if answer is None:
                out.append(RewriteResult(None, "no_substitute"))
            elif isinstance(answer, tuple):
                out.append(RewriteResult(answer[1], None, truncated=True, raw=answer[1]))
            else:
                out.append(RewriteResult(answer, None, raw=answer))
        return out


def judge(request: RewriteRequest, answer, truncated: bool = False) -> RewriteResult:
    """The single-attempt verdict of rewrite_with_retries on one scripted answer."""
    script = {request.caption: [("truncated", answer) if truncated else answer]}
    (res,), counts = rewrite_with_retries(Scripted(script), [request], max_attempts=1)
    assert counts == (Counter({res.reason: 1}) if res.reason else Counter())
    return res


HELMET = req("A person wearing a red helmet", "red")
BLUE = "A person wearing a blue helmet."


# -- clean_generation --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "generation, cleaned",
    [
        ("<think>\n\n</think>\n\nA person wearing a blue helmet.", BLUE),  # Qwen3, thinking disabled
        ("<think>\nRed is the keyword; blue conflicts.\n</think>\nA person wearing a blue helmet.", BLUE),
        ("Red is the keyword.\n</think>\n\nA person wearing a blue helmet.", BLUE),  # template opened the block
        ("<think>\nRed is the keyword, so", ""),  # never answered
        ("Output: A person wearing a blue helmet.", BLUE),
        ("New caption: A person wearing a blue helmet.", BLUE),
        ("**Output:** A person wearing a blue helmet.", BLUE),
        ("Rewritten caption - A person wearing a blue helmet.", BLUE),
        ("Sure, here is the new caption: A person wearing a blue helmet.", BLUE),
        ("Sure! Here is the new caption:\n\nA person wearing a blue helmet.", BLUE),
        ("Sure!\nA person wearing a blue helmet.", BLUE),
        ("Here's the output: Output: A person wearing a blue helmet.", BLUE),
        ('"A person wearing a blue helmet."', BLUE),
        ('"A person wearing a blue helmet".', BLUE),  # period outside the quotes kept
        ("\u201cA person wearing a blue helmet.\u201d", BLUE),
        ('**"A person wearing a blue helmet."**', BLUE),
        ("  A person wearing a blue helmet.  \n", BLUE),
        ("A person wearing a blue helmet.\nExplanation: red -> blue", BLUE + "\nExplanation: red -> blue"),
        ("Here are two dogs on a bench", "Here are two dogs on a bench"),  # no colon: a caption, untouched
        ("'Stop' sign on a pole", "'Stop' sign on a pole"),  # quotes that do not wrap the text stay
        ('"Stop" and "Go" signs', '"Stop" and "Go" signs'),
        ("`A person wearing a blue helmet.`", BLUE),
    ],
)
def test_clean_generation(generation, cleaned):
    assert clean_generation(generation) == cleaned
    assert clean_generation(cleaned) == cleaned.strip()  # idempotent


def test_clean_generation_rejects_non_text():
    with pytest.raises(TypeError, match="str"):
        clean_generation(None)  # type: ignore[arg-type]


# -- verdicts (clean + validate) -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_, answer, truncated, reason, accepted",
    [
        (HELMET, "<think>\n\n</think>\n\nA person wearing a blue helmet.", False, None, BLUE),
        (HELMET, "Sure, here is the new caption: A person wearing a blue helmet.", False, None, BLUE),
        (HELMET, "a PERSON wearing a Blue helmet", False, None, "a PERSON wearing a Blue helmet"),  # case, period
        (HELMET, "A person wearing a blue helmet.\nA person wearing a green helmet.", False, "multi_line", None),
        (HELMET, "A person wearing a blue helmet.", True, "truncated", None),  # valid text, but cut off
        (HELMET, "A person wearing a red helmet.", False, "unchanged", None),
        (HELMET, "A man wearing a blue helmet.", False, "outside_keyword_span", None),
        (HELMET, "A person wearing a blue hat.", False, "outside_keyword_span", None),
        (HELMET, "<think>\n\n</think>\n\n", False, "empty", None),
        (HELMET, None, False, "no_substitute", None),  # a backend's refusal keeps its reason
        (req("a apple on a table", "apple", "object"), "an orange on a table", False, None, "an orange on a table"),
        (req("a red car", "red"), "an red car", False, "keyword_unchanged", None),  # only the article changed
        (req("A child standing in front of the tree", "in front of", "relation", "front"),
         "A child standing behind the tree.", False, None, "A child standing behind the tree."),
        # keyword at the end: an explanation or a second sentence after the replacement is not the replacement
        (req("A man riding a horse", "horse", "object"),
         "A man riding a bike. Explanation: the keyword 'horse' was replaced with 'bike'.", False,
         "outside_keyword_span", None),
        (req("A man riding a horse", "horse", "object"), "A man riding a bike (changed horse -> bike)", False,
         "outside_keyword_span", None),
        (req("A man riding a horse", "horse", "object"), "A man riding a bike.", False, None, "A man riding a bike."),
        (req("a red car", "red"), "a ... car", False, "outside_keyword_span", None),  # punctuation deletes it
    ],
)
def test_verdicts(request_, answer, truncated, reason, accepted):
    res = judge(request_, answer, truncated)
    assert (res.reason, res.negative_caption) == (reason, accepted)
    assert res.attempt == 0 and res.raw == answer
    assert reason is None or reason in REJECTION_REASONS + ("no_substitute",)


def test_prompt_keyword_names_the_content_word_of_a_spatial_phrase():
    front = req("A child standing in front of the tree", "in front of", "relation", "front")
    assert prompt_keyword(front) == "front"
    assert request_prompt(front, "hc").endswith("Input: A child standing in front of the tree Keyword: front Output:")
    assert prompt_keyword(req("A lamp placed to the left of the sofa", "to the left of", "relation", "left")) == "left"
    # single words and multi-word objects are shown as written
    assert prompt_keyword(req("A woman holding a coffee cup", "coffee cup", "object")) == "coffee cup"
    assert prompt_keyword(req("A woman holding a coffee cup", "holding", "relation", "hold")) == "holding"
    assert prompt_keyword(req("A Red car", "Red", "attribute", "red")) == "Red"


# -- retries ---------------------------------------------------------------------------------------------------
FAILS_TWICE = {
    "A person wearing a red helmet": [("truncated", "A person wearing a"), "A person wearing a red helmet.", BLUE],
    "A dog running in the park": ["A cat running in the park.", "unused", "unused"],
}
REQS = [HELMET, req("A dog running in the park", "dog", "object")]


def test_retry_accepts_on_the_third_attempt():
    rw = Scripted(FAILS_TWICE)
    assert isinstance(rw, Rewriter)
    results, rejected = rewrite_with_retries(rw, REQS, max_attempts=3)
    assert [(r.negative_caption, r.reason, r.attempt) for r in results] == [
        (BLUE, None, 2), ("A cat running in the park.", None, 0)]
    assert rejected == Counter()
    # only the rejected request is asked again, with the next attempt number
    assert rw.calls == [(0, [HELMET.caption, REQS[1].caption]), (1, [HELMET.caption]), (2, [HELMET.caption])]


def test_retry_limit_counts_the_last_reason():
    rw = Scripted(FAILS_TWICE)
    results, rejected = rewrite_with_retries(rw, REQS, max_attempts=2)
    assert results[0] == RewriteResult(None, "unchanged", truncated=False, raw="A person wearing a red helmet.",
                                       attempt=1)
    assert results[1].negative_caption == "A cat running in the park."
    assert rejected == Counter({"unchanged": 1})
    assert [a for a, _ in rw.calls] == [0, 1]
    # no retry at all
    results, rejected = rewrite_with_retries(Scripted(FAILS_TWICE), REQS, max_attempts=1)
    assert results[0].reason == "truncated" and results[0].truncated and rejected == Counter({"truncated": 1})


def test_retry_counts_every_final_reason():
    script = {
        "A red car": [None, None],
        "A blue car": ["A blue car", "A blue car."],
        "A green car": ["A green bus", "A yellow car"],
    }
    reqs = [req("A red car", "red"), req("A blue car", "blue"), req("A green car", "green")]
    results, rejected = rewrite_with_retries(Scripted(script), reqs, max_attempts=2)
    assert [r.reason for r in results] == ["no_substitute", "unchanged", None]
    assert results[2].negative_caption == "A yellow car" and results[2].attempt == 1
    assert rejected == Counter({"no_substitute": 1, "unchanged": 1})


def test_retry_errors_and_empty_input():
    with pytest.raises(ValueError, match="max_attempts"):
        rewrite_with_retries(Scripted({}), REQS, max_attempts=0)

    class Short:
        def rewrite(self, requests, attempt=0):
            return []

    with pytest.raises(RuntimeError, match="Short.rewrite returned 0 results for 2 requests"):
        rewrite_with_retries(Short(), REQS)
    assert rewrite_with_retries(Short(), [], max_attempts=3) == ([], Counter())


def test_retry_seed_is_fixed_and_separates_streams():
    assert retry_seed(0, 1) == 1513370424  # BLAKE2b of "0,1": stable across runs and machines
    assert retry_seed(5, 1) == 1026728666
    seeds = {retry_seed(s, a, *salt) for s in range(3) for a in range(1, 4) for salt in ((), (0,), (1,))}
    assert len(seeds) == 27 and all(0 <= v < 2**31 for v in seeds)
