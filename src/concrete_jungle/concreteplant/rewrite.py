"""Caption rewriting of ConcretePlant: t'_i = f_cap(t_i, keyword) (paper Sec. 2.2 "Hard Negative Mining", A.2).

The paper's rewriter f_cap is Qwen3-32B prompted with the A.2 prompt (:data:`A2_PROMPT`,
:func:`build_prompt`), with in-context examples chosen by compositional type (attribute / relation /
object) and a shared example set for the dataset built "without considering concreteness" (D_wo).
Every rewriter implements the :class:`Rewriter` protocol: a batch of :class:`RewriteRequest` in, one
:class:`RewriteResult` per request out (a negative caption, or ``None`` and a reason); ``attempt`` > 0 asks
for the attempt-th retry (a different answer, reproducibly).

Backends (:class:`RewriterParams` ``backend``, built by :func:`concrete_jungle.concreteplant.rewriters.build_rewriter`):

* ``lexical`` — :class:`~concrete_jungle.concreteplant.lexical.LexicalRewriter` (offline substitution lists);
* ``llm`` — :class:`~concrete_jungle.concreteplant.llm.TransformersRewriter` (Hugging Face transformers,
  the model's chat template, batched greedy decoding);
* ``vllm`` — :class:`~concrete_jungle.concreteplant.llm.VLLMRewriter` (vLLM offline batch inference, tensor
  parallelism; optional dependency).

The LLM backends see the A.2 prompt of :func:`request_prompt`; the keyword they are shown is
:func:`prompt_keyword`.

:func:`validate_rewrite` checks any rewriter's output: non-empty, one line, changed, and changed only inside
the keyword span (plus an adjacent a/an article). :func:`clean_generation` first strips what chat models wrap
around an answer (a think block, "Output:", "Sure, here is ...:", quotes). :func:`rewrite_with_retries` runs a
rewriter, cleans and validates every answer, re-asks the rejected requests, and counts the final rejections
by reason.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from concrete_jungle.params import RewriterParams  # noqa: F401 (config lives in params)

__all__ = [
    "REWRITE_TYPES",
    "DATASETS",
    "A2_PROMPT",
    "A2_EXAMPLES",
    "format_examples",
    "build_prompt",
    "prompt_keyword",
    "request_prompt",
    "RewriteRequest",
    "RewriteResult",
    "Rewriter",
    "validate_rewrite",
    "clean_generation",
    "retry_seed",
    "rewrite_with_retries",
    "REJECTION_REASONS",
    "RewriterParams",
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

    @classmethod
    def for_keyword(cls, caption: str, keyword) -> "RewriteRequest":
        """The request for a sampled keyword (a ``keywords.Candidate``: text, start, end, type, lemma) of ``caption``.

        Raises:
            ValueError: as the constructor (span outside the caption, text mismatch, unknown type).
        """
        return cls(caption=caption, keyword=keyword.text, start=keyword.start, end=keyword.end, type=keyword.type,
                   lemma=keyword.lemma)


@dataclass(frozen=True)
class RewriteResult:
    """A rewriter's answer: ``negative_caption`` t'_i, or ``None`` with the ``reason`` it was not produced.

    Attributes:
        negative_caption: the rewritten caption t'_i (LLM backends: the generation after
            :func:`clean_generation`), or ``None``.
        reason: why there is no caption (a backend reason such as ``"no_substitute"``, or after
            :func:`rewrite_with_retries` a rejection reason of :data:`REJECTION_REASONS`), else ``None``.
        truncated: the generation stopped at the token limit (``max_new_tokens``) before its end-of-sequence
            token; :func:`rewrite_with_retries` rejects it as ``"truncated"``.
        raw: the decoded generation before cleaning (LLM backends), for inspection; ``None`` otherwise.
        attempt: the attempt that produced this result (0 = first, greedy); set by :func:`rewrite_with_retries`.
    """

    negative_caption: str | None
    reason: str | None
    truncated: bool = False
    raw: str | None = None
    attempt: int = 0


@runtime_checkable
class Rewriter(Protocol):
    """Anything that turns a batch of requests into one result per request, in order (f_cap of Sec. 2.2)."""

    def rewrite(self, requests: list[RewriteRequest], attempt: int = 0) -> list[RewriteResult]:
        """Rewrite every request; ``len(result) == len(requests)``.

        ``attempt`` 0 asks for the first answer (LLM backends: greedy decoding); ``attempt`` k > 0 for the k-th
        retry of requests whose earlier answer was rejected (LLM backends: temperature sampling seeded from
        (seed, k); the lexical backend: its k-th alternative substitute). The same inputs give the same output.
        """
        ...


def prompt_keyword(request: RewriteRequest) -> str:
    """The keyword as the LLM is shown it in the A.2 prompt.

    The request's keyword text ``caption[start:end]``, except for a multi-word spatial relation phrase
    ("in front of", "to the left of", "on top of", "next to"): the A.2 examples name such a phrase by its
    content word ("Keyword: front", "Keyword: left"), so the phrase's content word — the request's ``lemma``
    when it is one of the phrase's words — is shown instead. Whatever is shown, the answer is judged against
    the request's whole span (:func:`validate_rewrite`), so "in front of" -> "behind" is a valid rewrite.
    """
    words = request.keyword.lower().split()
    if request.type == "relation" and len(words) > 1 and request.lemma.lower() in words:
        return request.lemma
    return request.keyword


def request_prompt(request: RewriteRequest, dataset: str) -> str:
    """The A.2 prompt (:func:`build_prompt`) for one request of ConcreteBatch ``dataset`` (``hc``/``lc``/``wo``),
    showing :func:`prompt_keyword`.

    Raises:
        ValueError: on an unknown ``dataset`` (see :func:`build_prompt`).
    """
    return build_prompt(request.caption, prompt_keyword(request), request.type, dataset)


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
#: Punctuation that never belongs to a replacement word or phrase: a sentence end followed by more text, a
#: colon or semicolon, brackets ("a bike. Explanation: ...", "a bike (changed horse)").
_EXTRA_TEXT = re.compile(r"[.!?]\s*\S|[:;()\[\]{}]")


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
            if not any(ch.isalnum() for ch in new):
                return "outside_keyword_span"  # punctuation only: the keyword is deleted
            if _EXTRA_TEXT.search(middle) and not _EXTRA_TEXT.search(_norm(caption[start:end])):
                return "outside_keyword_span"  # a second sentence / an explanation after the replacement
            if new == keyword:
                return "keyword_unchanged"
            if new.split(" ", 1)[0] in ("a", "an", "the") and (" " + p.rstrip()).endswith((" a", " an", " the")):
                return "outside_keyword_span"  # a doubled article ("a a cat")
            return None
    return "outside_keyword_span"


# --------------------------------------------------------------------------------------------------------
# Cleaning LLM generations
# --------------------------------------------------------------------------------------------------------
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
# A label in front of the answer: "Output:", "New caption:", "Rewritten caption -", "**Answer:**".
_LABEL = re.compile(
    r"^\**\s*(?:(?:the|my)\s+)?(?:(?:new|rewritten|modified|edited|negative|hard[- ]negative|final|updated|"
    r"changed|generated)\s+)*(?:output|caption|answer|result|sentence)\s*\**\s*[:\-]\s*\**\s*",
    re.IGNORECASE,
)
# Chat filler that ends in a colon: "Sure, here is the new caption:", "Here's the output:".
_FILLER = re.compile(
    r"^(?:sure|okay|ok|certainly|of course|alright|absolutely|here(?:'s|\s+is|\s+are)?)\b[^:\n]*:\s*",
    re.IGNORECASE,
)
# A filler line on its own: "Sure!", "Okay.", "Certainly,".
_FILLER_LINE = re.compile(r"^(?:sure|okay|ok|certainly|of course|alright|absolutely)\W*$", re.IGNORECASE)
_QUOTES = (('"', '"'), ("“", "”"), ("'", "'"), ("‘", "’"), ("`", "`"), ("**", "**"))


def _strip_quotes(text: str) -> str:
    """Remove one pair of quotes wrapping the whole text (not '"Stop" and "Go" signs'), up to 3 levels."""
    for _ in range(3):  # nested: **"..."**
        text = text.strip()
        for left, right in _QUOTES:
            if len(text) <= len(left) + len(right) or not text.startswith(left):
                continue
            tail = right if text.endswith(right) else right + "." if text.endswith(right + ".") else None
            if tail is None:
                continue
            inner = text[len(left) : len(text) - len(tail)]
            if left in inner or right in inner:  # the quotes do not wrap the whole text
                continue
            text = inner + tail[len(right) :]  # "A cat on a mat". keeps its period
            break
        else:
            return text
    return text.strip()


def clean_generation(text: str) -> str:
    """Strip what a chat model wraps around its answer, leaving the caption to validate.

    In order: (1) a think block — everything up to the last ``</think>`` (a ``<think>...</think>`` block, even
    empty, as Qwen3 emits it with thinking disabled, or a bare closing tag when the chat template opened the
    block); an unclosed leading ``<think>`` means the model never answered and gives ``""``; (2) leading blank
    lines, lines ending in a colon ("Sure! Here is the new caption:") and filler-only lines ("Sure!") when
    more lines follow; (3) a leading chat preamble on the answer's line — "Sure, here is ...:", "Here's ...:"
    — and answer labels such as "Output:", "New caption:", "Rewritten caption:", "**Answer:**"; (4) a
    surrounding pair of quotes, typographic quotes, backticks or ``**`` (a final period just outside the
    closing quote is kept inside); (5) surrounding whitespace. Anything else is left for
    :func:`validate_rewrite` to judge (a second line, an explanation, a changed word stay and are rejected).

    Args:
        text: one decoded generation (str). ``None`` is not accepted.

    Returns:
        The cleaned text (possibly ``""``).

    Raises:
        TypeError: if ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"clean_generation: text must be a str, got {type(text).__name__}")
    if _THINK_CLOSE in text:
        text = text[text.rindex(_THINK_CLOSE) + len(_THINK_CLOSE) :]
    elif text.lstrip().startswith(_THINK_OPEN):
        return ""
    lines = text.strip().splitlines()
    while len(lines) > 1 and (
        not lines[0].strip() or lines[0].rstrip().endswith(":") or _FILLER_LINE.match(lines[0].strip())
    ):
        lines.pop(0)
    text = "\n".join(lines).strip()
    for _ in range(3):  # "Sure, here it is: Output: ..." needs two passes
        before = text
        text = _FILLER.sub("", text, count=1)
        text = _LABEL.sub("", text, count=1)
        if text == before:
            break
    return _strip_quotes(text)


# --------------------------------------------------------------------------------------------------------
# Retries
# --------------------------------------------------------------------------------------------------------
#: Reasons a rewrite is finally rejected, as counted by :func:`rewrite_with_retries` (backends may add their
#: own, e.g. the lexical ``"no_substitute"``).
REJECTION_REASONS = ("truncated", "empty", "multi_line", "unchanged", "outside_keyword_span", "keyword_unchanged")


def retry_seed(seed: int, attempt: int, *salt: int) -> int:
    """A reproducible 31-bit seed for retry ``attempt`` (> 0) of a rewriter seeded with ``seed``.

    Derived by hashing ``(seed, attempt, *salt)`` (BLAKE2b), so neighbouring seeds or attempts do not give
    correlated streams; ``salt`` separates further streams (e.g. the batch index of the transformers backend).
    The result fits every engine's seed type (vLLM ``SamplingParams.seed``, ``torch.manual_seed``).
    """
    key = ",".join(str(int(v)) for v in (seed, attempt, *salt)).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") & 0x7FFF_FFFF


def _judge(request: RewriteRequest, result: RewriteResult) -> tuple[str | None, str | None]:
    """(cleaned caption, rejection reason or None) of one backend answer."""
    if result.negative_caption is None:
        return None, result.reason or "empty"
    if result.truncated:
        return None, "truncated"
    cleaned = clean_generation(result.negative_caption)
    reason = validate_rewrite(request.caption, request.start, request.end, cleaned)
    return (cleaned, None) if reason is None else (None, reason)


def rewrite_with_retries(
    rewriter: Rewriter, requests: Sequence[RewriteRequest], max_attempts: int = 3, grammar=None
) -> tuple[list[RewriteResult], Counter]:
    """Rewrite every request with ``rewriter``, re-asking those whose answer is rejected (Sec. 2.2 f_cap).

    Attempt 0 sends all requests (``rewriter.rewrite(requests, attempt=0)``: the LLM backends decode greedily).
    Each answer is judged: a backend refusal (``negative_caption is None``) keeps the backend's reason; a
    generation cut at the token limit is ``"truncated"``; otherwise the text goes through
    :func:`clean_generation` and :func:`validate_rewrite` against the request's caption and keyword span.
    Attempt k = 1, 2, ... sends only the requests rejected at attempt k-1 (``attempt=k``: the LLM backends
    sample with the retry temperature and a seed derived from (seed, k)), up to ``max_attempts`` attempts in
    all. ``max_attempts=1`` means no retry. With ``grammar``, the answers that pass the validator are then
    checked together (``grammar(requests, negatives) -> [reason or None]``, e.g.
    :class:`~concrete_jungle.concreteplant.grammar.GrammarCheck`: the new span must keep the keyword's role, A.1);
    one it rejects is ``"grammar"`` and retried like any rejection.

    Args:
        rewriter: any :class:`Rewriter`.
        requests: the requests, in order.
        max_attempts: attempts per request, >= 1.
        grammar: optional batch grammar check (see above); ``None`` skips it.

    Returns:
        ``(results, rejected)``: one :class:`RewriteResult` per request, in order — the accepted, cleaned
        negative caption with ``reason=None``, or ``negative_caption=None`` with the LAST attempt's rejection
        reason; ``attempt`` says which attempt produced it and ``raw`` / ``truncated`` are the backend's — and a
        Counter of the final rejection reasons (requests accepted on a retry are not counted).

    Raises:
        ValueError: if ``max_attempts < 1``.
        RuntimeError: if the rewriter returns a different number of results than it was given requests.
    """
    if max_attempts < 1:
        raise ValueError(f"rewrite_with_retries: max_attempts must be >= 1, got {max_attempts}")
    requests = list(requests)
    final: list[RewriteResult | None] = [None] * len(requests)
    pending = list(range(len(requests)))
    for attempt in range(max_attempts):
        if not pending:
            break
        answers = rewriter.rewrite([requests[i] for i in pending], attempt=attempt)
        if len(answers) != len(pending):
            raise RuntimeError(
                f"{type(rewriter).__name__}.rewrite returned {len(answers)} results for {len(pending)} requests "
                f"(attempt {attempt})"
            )
        judged = [(i, answer, *_judge(requests[i], answer)) for i, answer in zip(pending, answers)]
        if grammar is not None:
            passed = [(k, i, cleaned) for k, (i, _, cleaned, reason) in enumerate(judged) if reason is None]
            verdicts = grammar([requests[i] for _, i, _ in passed], [cleaned for _, _, cleaned in passed])
            for (k, i, _), verdict in zip(passed, verdicts):
                if verdict is not None:
                    judged[k] = (i, judged[k][1], None, verdict)
        rejected = []
        for i, answer, cleaned, reason in judged:
            final[i] = replace(answer, negative_caption=cleaned, reason=reason, attempt=attempt)
            if reason is not None:
                rejected.append(i)
        pending = rejected
    results = [r for r in final if r is not None]
    return results, Counter(r.reason for r in results if r.reason is not None)
