"""Caption rewriting of ConcretePlant: t'_i = f_cap(t_i, keyword) (paper Sec. 2.2 "Hard Negative Mining", A.2).

The paper's rewriter f_cap is Qwen3-32B prompted with the A.2 prompt (:data:`A2_PROMPT`,
:func:`build_prompt`), with in-context examples chosen by compositional type (attribute / relation /
object) and a shared example set for the dataset built "without considering concreteness" (D_wo).
Every rewriter implements the :class:`Rewriter` protocol: a batch of :class:`RewriteRequest` in, one
:class:`RewriteResult` per request out (a negative caption, or ``None`` and a reason).

Backends: :class:`~concrete_jungle.concreteplant.lexical.LexicalRewriter` (offline substitution lists).

:func:`validate_rewrite` checks any rewriter's output: non-empty, one line, changed, and changed only inside
the keyword span (plus an adjacent a/an article).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "REWRITE_TYPES",
    "DATASETS",
    "A2_PROMPT",
    "A2_EXAMPLES",
    "format_examples",
    "build_prompt",
    "RewriteRequest",
    "RewriteResult",
    "Rewriter",
    "validate_rewrite",
]

REWRITE_TYPES = ("attribute", "relation", "object")
DATASETS = ("hc", "lc", "wo")

# --------------------------------------------------------------------------------------------------------
# A.2 prompt (words verbatim from the paper; the paper's bold run-in labels are written as plain text and
# each instruction starts a new line). Placeholders, in order: examples, caption, keyword.
# --------------------------------------------------------------------------------------------------------
A2_PROMPT = (
    "Task: You are an expert data engineer. Given a conceptual caption, your goal is to generate a new "
    "caption that is physically and grammatically correct but factually mismatched to the original image.\n"
    "Instruction:\n"
    "1. You will be provided with an original caption and a target keyword present in the caption.\n"
    "2. Locate the keyword within the caption and replace it with a new word or phrase that creates a clear "
    "visual conflict.\n"
    "3. Keep the sentence structure, grammar, and all other words identical to the original.\n"
    '4. The output must be physically sensible (e.g., "A hat wearing a man" is NOT allowed).\n'
    "5. ONLY output the new caption, do not include reasons for the output.\n"
    "Examples:\n"
    "{}\n"
    "Input: {} Keyword: {} Output:"
)

#: The four in-context example sets of A.2: (input caption, keyword, output caption).
A2_EXAMPLES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "attribute": (
        ("A person wearing a red helmet", "red", "A person wearing a blue helmet."),
        ("A wooden boat floating on the water", "wooden", "A plastic boat floating on the water."),
        ("The cloudy sky over the city", "cloudy", "The clear sky over the city."),
    ),
    "relation": (
        ("A cat sitting under a table", "under", "A cat sitting on a table."),
        ("A child standing in front of the tree", "front", "A child standing behind the tree."),
        ("A lamp placed to the left of the sofa", "left", "A lamp placed to the right of the sofa."),
    ),
    "object": (
        ("A dog running in the park", "dog", "A cat running in the park."),
        ("A woman holding a coffee cup", "coffee cup", "A woman holding a laptop."),
        ("A car driving on the highway", "highway", "A car driving on the grass."),
    ),
    "without_concreteness": (
        ("A person wearing a red helmet", "red", "A person wearing a blue helmet."),
        ("A child standing in front of the tree", "front", "A child standing behind the tree."),
        ("A car driving on the highway", "highway", "A car driving on the grass."),
    ),
}


def format_examples(examples: Sequence[tuple[str, str, str]]) -> str:
    """One line per in-context example, as printed in A.2: ``Input: ..., Keyword: ..., Output: ...``."""
    return "\n".join(f"Input: {i}, Keyword: {k}, Output: {o}" for i, k, o in examples)


def build_prompt(caption: str, keyword: str, type: str, dataset: str) -> str:  # noqa: A002 (paper term)
    """The A.2 prompt for one anchor: task, instructions, in-context examples, then the query.

    Args:
        caption: the anchor caption t_i.
        keyword: the selected keyword as the LLM should see it (e.g. "red", "front", "coffee cup").
        type: compositional type of the keyword: "attribute", "relation" or "object".
        dataset: "hc" or "lc" use the type's example set; "wo" (D_wo) uses the "without considering
            concreteness" set whatever the type.

    Raises:
        ValueError: on an unknown ``type`` or ``dataset``, or an empty caption / keyword.
    """
    if type not in REWRITE_TYPES:
        raise ValueError(f"build_prompt: type must be one of {REWRITE_TYPES}, got {type!r}")
    if dataset not in DATASETS:
        raise ValueError(f"build_prompt: dataset must be one of {DATASETS}, got {dataset!r}")
    if not caption or not caption.strip() or not keyword or not keyword.strip():
        raise ValueError("build_prompt: caption and keyword must be non-empty")
    key = "without_concreteness" if dataset == "wo" else type
    return A2_PROMPT.format(format_examples(A2_EXAMPLES[key]), caption, keyword)


# --------------------------------------------------------------------------------------------------------
# Request / result / protocol
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RewriteRequest:
    """One caption to rewrite: the anchor caption t_i and its keyword span.

    Attributes:
        caption: anchor caption.
        keyword: the surface text of the keyword, ``caption[start:end]``.
        start, end: character offsets of the keyword span.
        type: "attribute", "relation" or "object".
        lemma: the keyword's lookup key (see ``keywords.Candidate.lemma``).

    Raises:
        ValueError: if the span is out of range or empty, ``caption[start:end] != keyword``, or ``type`` is
            unknown.
    """

    caption: str
    keyword: str
    start: int
    end: int
    type: str
    lemma: str

    def __post_init__(self) -> None:
        if self.type not in REWRITE_TYPES:
            raise ValueError(f"RewriteRequest.type must be one of {REWRITE_TYPES}, got {self.type!r}")
        if not 0 <= self.start < self.end <= len(self.caption):
            raise ValueError(
                f"RewriteRequest span [{self.start}, {self.end}) is not inside the caption "
                f"(length {len(self.caption)}): {self.caption!r}"
            )
        if self.caption[self.start : self.end] != self.keyword:
            raise ValueError(
                f"RewriteRequest.keyword {self.keyword!r} != caption[{self.start}:{self.end}] "
                f"{self.caption[self.start:self.end]!r}"
            )


@dataclass(frozen=True)
class RewriteResult:
    """A rewriter's answer: ``negative_caption`` t'_i, or ``None`` with the ``reason`` it was not produced."""

    negative_caption: str | None
    reason: str | None


@runtime_checkable
class Rewriter(Protocol):
    """Anything that turns a batch of requests into one result per request, in order."""

    def rewrite(self, requests: list[RewriteRequest]) -> list[RewriteResult]:
        """Rewrite every request; ``len(result) == len(requests)``."""
        ...


# --------------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------------
_WS = re.compile(r"\s+")
_ARTICLE_END = re.compile(r"(^|.*\s)(a|an)\s$", re.IGNORECASE | re.DOTALL)


def _norm(text: str) -> str:
    return _WS.sub(" ", text).casefold()


def _strip_period(text: str) -> str:
    text = text.rstrip()
    return text[:-1].rstrip() if text.endswith(".") else text


_PUNCT = re.compile(r"[^\w\s'-]")


def validate_rewrite(caption: str, start: int, end: int, negative_caption: str | None) -> str | None:
    """Check a rewritten caption; return a rejection reason or ``None`` when it is acceptable.

    Reasons, in the order checked: ``"empty"`` (None or blank), ``"multi_line"`` (a line break inside the
    stripped text), ``"unchanged"`` (equal to the caption), ``"outside_keyword_span"`` (anything outside
    ``caption[start:end]`` differs, except an a/an article right before the span, or an article is doubled),
    ``"keyword_unchanged"`` (the span's new text equals the keyword up to punctuation). Comparisons ignore case,
    whitespace runs, surrounding whitespace and one final period. Deleting the keyword (an empty
    replacement) is reported as ``"outside_keyword_span"``.

    Raises:
        ValueError: if ``[start, end)`` is not a non-empty span inside ``caption``.
    """
    if not 0 <= start < end <= len(caption):
        raise ValueError(f"validate_rewrite: span [{start}, {end}) not inside caption of length {len(caption)}")
    if negative_caption is None or not negative_caption.strip():
        return "empty"
    neg_raw = negative_caption.strip()
    if "\n" in neg_raw or "\r" in neg_raw:
        return "multi_line"
    neg = _strip_period(_norm(neg_raw))
    if neg == _strip_period(_norm(caption.strip())):
        return "unchanged"
    prefix = _norm(caption[:start]).lstrip()
    suffix = _strip_period(_norm(caption[end:]))
    prefixes = [prefix]
    m = _ARTICLE_END.match(prefix)
    if m:
        head = prefix[: m.start(2)]
        prefixes = [head + "a ", head + "an "]
    keyword = _PUNCT.sub("", _norm(caption[start:end])).strip()
    for p in prefixes:
        if len(neg) > len(p) + len(suffix) and neg.startswith(p) and neg.endswith(suffix):
            middle = neg[len(p) : len(neg) - len(suffix)]
            if not middle.strip():
                continue
            new = _PUNCT.sub("", middle).strip()
            if new == keyword:
                return "keyword_unchanged"
            if new.split(" ", 1)[0] in ("a", "an", "the") and (" " + p.rstrip()).endswith((" a", " an", " the")):
                return "outside_keyword_span"  # a doubled article ("a a cat")
            return None
    return "outside_keyword_span"
