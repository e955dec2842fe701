"""Offline lexical rewriter of ConcretePlant: substitute the keyword with a same-kind word (paper Sec. 2.2, A.2).

:class:`LexicalRewriter` substitutes the keyword span with a word of the same kind — colours, sizes, materials,
numbers, states (attributes); opposite spatial relations and other interaction verbs (relations); objects of
the same kind: animals, vehicles, food, furniture, shapes, people, ... (objects). Optionally its choices are
restricted to a given vocabulary (e.g. the scene world's words by kind). It implements
:class:`~concrete_jungle.concreteplant.rewrite.Rewriter`; every output passes
:func:`~concrete_jungle.concreteplant.rewrite.validate_rewrite`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from concrete_jungle.concreteplant.rewrite import (
    _ARTICLE_END,
    _WS,
    RewriteRequest,
    RewriteResult,
    validate_rewrite,
)

__all__ = [
    "ATTRIBUTE_KINDS",
    "RELATION_KINDS",
    "OBJECT_KINDS",
    "OPPOSITES",
    "LexicalRewriter",
    "indefinite_article",
    "pluralize",
]


# --------------------------------------------------------------------------------------------------------
# Morphology helpers
# --------------------------------------------------------------------------------------------------------
_IRREGULAR_PLURALS = {
    "man": "men", "woman": "women", "person": "people", "child": "children", "mouse": "mice",
    "foot": "feet", "tooth": "teeth", "goose": "geese", "sheep": "sheep", "deer": "deer", "fish": "fish",
    "knife": "knives", "leaf": "leaves", "shelf": "shelves", "loaf": "loaves", "wolf": "wolves",
    "calf": "calves", "scarf": "scarves", "tomato": "tomatoes", "potato": "potatoes", "ox": "oxen",
    "bookshelf": "bookshelves", "gentleman": "gentlemen", "policeman": "policemen", "bus": "buses",
    "cactus": "cacti", "bench": "benches", "couch": "couches", "sandwich": "sandwiches", "glass": "glasses",
    "dress": "dresses", "box": "boxes", "watch": "watches", "lady": "ladies", "baby": "babies",
}
_SINGULAR_OF = {v: k for k, v in _IRREGULAR_PLURALS.items()}


def pluralize(noun: str) -> str:
    """English plural of a (possibly two-word) noun; the last word is inflected ("coffee cup" -> "coffee cups")."""
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


_AN_EXCEPTIONS = ("hour", "honest", "honor", "honour", "heir", "8", "11", "18", "80")
_A_EXCEPTIONS = ("uni", "use", "usu", "uk", "eu", "one", "once", "ur")


def indefinite_article(word: str) -> str:
    """``"an"`` before a vowel sound, else ``"a"`` (spelling heuristic with a few exceptions: "an hour",
    "a unicorn", "a one-way", "an 8")."""
    w = word.lower()
    if w.startswith(_AN_EXCEPTIONS):
        return "an"
    if w.startswith(_A_EXCEPTIONS):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


# --------------------------------------------------------------------------------------------------------
# Substitution lists (kind -> words) and directed opposites
# --------------------------------------------------------------------------------------------------------
def _words(s: str) -> tuple[str, ...]:
    return tuple(w.replace("_", " ") for w in s.split())


ATTRIBUTE_KINDS: dict[str, tuple[str, ...]] = {
    "colour": _words("red blue green yellow orange purple pink brown black white gray grey silver"),
    "size": _words("large small big little huge tiny tall short long giant wide narrow thick thin"),
    "material": _words(
        "wooden wood metal metallic plastic glass stone brick leather paper rubber concrete ceramic steel "
        "marble cardboard wicker iron"
    ),
    "number": _words("two three four five six seven eight nine ten 2 3 4 5 6 7 8 9 10"),
    "shape": _words("round square rectangular circular triangular oval"),
    "state": _words(
        "open closed empty full wet dry clean dirty old new young sunny cloudy clear hot cold light dark "
        "bright sliced whole cut shredded cooked raw fresh rotten ripe unripe parked moving lit unlit "
        "striped plain grassy sandy snowy smiling frowning standing sitting filled covered uncovered busy high "
        "low elderly outdoor indoor painted unpainted"
    ),
}

RELATION_KINDS: dict[str, tuple[str, ...]] = {
    "spatial": _words(
        "to_the_left_of to_the_right_of on_the_left_of on_the_right_of on_the_left_side_of "
        "on_the_right_side_of to_the_left to_the_right on_the_left on_the_right above below over under on "
        "beneath underneath in_front_of in_the_front_of behind inside outside inside_of outside_of in into "
        "out_of on_top_of at_the_top_of at_the_bottom_of on_the_top_of on_the_bottom_of next_to close_to "
        "near beside by far_from away_from toward towards across_from in_the_middle_of in_the_center_of "
        "on_the_edge_of across along atop onto off against in_the_back_of in_back_of on_the_back_of "
        "ahead_of within on_the_side_of"
    ),
}

OBJECT_KINDS: dict[str, tuple[str, ...]] = {
    "animal": _words(
        "dog cat horse cow sheep elephant giraffe zebra bear bird duck goat pig lion tiger monkey rabbit "
        "deer pigeon seagull goose chicken"
    ),
    "person": _words(
        "man woman boy girl lady guy gentleman mother father son daughter brother sister husband wife "
        "child kid adult baby"
    ),
    "vehicle": _words(
        "car truck bus bicycle bike motorcycle train boat airplane plane van taxi scooter tractor jeep "
        "helicopter"
    ),
    "food": _words(
        "pizza sandwich banana apple orange donut doughnut cake hot_dog broccoli carrot burger hamburger "
        "salad bread cookie pie egg tomato potato pasta soup sushi steak cheese lettuce onion cucumber"
    ),
    "furniture": _words("chair table couch sofa bed bench desk shelf dresser stool cabinet bookshelf"),
    "kitchenware": _words(
        "cup mug bowl plate dish glass bottle fork knife spoon pan pot vase coffee_cup wine_glass jar "
        "kettle teapot"
    ),
    "clothing": _words("hat shirt jacket helmet cap dress coat tie scarf sweater shoe boot glove skirt suit"),
    "electronics": _words(
        "laptop computer phone cell_phone television tv keyboard mouse remote monitor camera tablet"
    ),
    "sports": _words(
        "ball frisbee kite skateboard surfboard snowboard tennis_racket racket bat baseball_bat skis"
    ),
    "sports_ball": _words("tennis_ball baseball soccer_ball football basketball volleyball"),
    "athlete": _words(
        "tennis_player baseball_player soccer_player skier surfer skateboarder snowboarder"
    ),
    "appliance": _words("oven stove refrigerator fridge microwave toaster dishwasher"),
    "body": _words("hand foot head face arm leg mouth nose ear"),
    "wall_item": _words("clock painting poster calendar"),
    "structure": _words("wall fence door window gate"),
    "landform": _words("mountain hill cliff rock"),
    "settlement": _words("city town village"),
    "bedding": _words("blanket pillow towel"),
    "monument": _words("statue fountain"),
    "carried": _words("umbrella suitcase backpack handbag bag book box basket toy teddy_bear luggage candle"),
    "street": _words("fire_hydrant stop_sign traffic_light parking_meter street_sign mailbox lamp_post"),
    "ground": _words(
        "street road highway grass field beach park sidewalk snow sand water river lake ocean sea dirt ground "
        "floor"
    ),
    "room": _words("kitchen bathroom bedroom living_room office"),
    "building": _words("house building tower church barn tent"),
    "plant": _words("tree flower bush plant"),
    "fixture": _words("toilet sink bathtub shower mirror"),
    "shape": _words(
        "circle square triangle rectangle star hexagon pentagon diamond oval heart cross cube sphere "
        "cylinder cone"
    ),
}


def _pairs(s: str) -> dict[str, tuple[str, ...]]:
    """Parse ``"a:b,c d:e"`` into {a: (b, c), d: (e,)}; underscores become spaces."""
    out: dict[str, tuple[str, ...]] = {}
    for item in s.split():
        k, v = item.split(":")
        out[k.replace("_", " ")] = tuple(x.replace("_", " ") for x in v.split(","))
    return out


#: Directed opposites, preferred over the rest of the kind (and the only choice for states, people and
#: relations, where a random member of the kind would not be a clear visual conflict).
OPPOSITES: dict[str, tuple[str, ...]] = _pairs(
    # sizes
    "large:small small:large,big big:small little:big huge:tiny tiny:huge tall:short short:tall,long "
    "long:short giant:tiny wide:narrow narrow:wide thick:thin thin:thick "
    # states
    "open:closed closed:open empty:full full:empty wet:dry dry:wet clean:dirty dirty:clean old:new "
    "new:old young:old sunny:cloudy cloudy:clear,sunny clear:cloudy hot:cold cold:hot light:dark "
    "dark:light bright:dark sliced:whole cut:whole shredded:whole whole:sliced cooked:raw raw:cooked "
    "fresh:rotten rotten:fresh ripe:unripe unripe:ripe parked:moving moving:parked lit:unlit unlit:lit "
    "striped:plain plain:striped grassy:sandy sandy:snowy snowy:grassy smiling:frowning frowning:smiling "
    "standing:sitting sitting:standing filled:empty covered:uncovered uncovered:covered busy:empty high:low "
    "low:high elderly:young outdoor:indoor indoor:outdoor painted:unpainted unpainted:painted "
    # people
    "man:woman woman:man boy:girl girl:boy lady:man guy:woman gentleman:lady mother:father "
    "father:mother son:daughter daughter:son brother:sister sister:brother husband:wife wife:husband "
    "child:adult kid:adult adult:child baby:adult "
    # spatial relations
    "to_the_left_of:to_the_right_of to_the_right_of:to_the_left_of on_the_left_of:on_the_right_of "
    "on_the_right_of:on_the_left_of on_the_left_side_of:on_the_right_side_of "
    "on_the_right_side_of:on_the_left_side_of to_the_left:to_the_right to_the_right:to_the_left "
    "on_the_left:on_the_right on_the_right:on_the_left above:below below:above over:under under:on "
    "on:under beneath:above underneath:above in_front_of:behind in_the_front_of:behind behind:in_front_of "
    "inside:outside outside:inside inside_of:outside_of outside_of:inside_of in:outside into:out_of "
    "out_of:into on_top_of:underneath at_the_top_of:at_the_bottom_of at_the_bottom_of:at_the_top_of "
    "on_the_top_of:on_the_bottom_of on_the_bottom_of:on_the_top_of next_to:far_from close_to:far_from "
    "near:far_from beside:far_from by:far_from far_from:next_to away_from:toward toward:away_from "
    "towards:away_from across_from:next_to in_the_middle_of:at_the_edge_of "
    "in_the_center_of:at_the_edge_of on_the_edge_of:in_the_middle_of across:along along:across "
    "atop:beneath onto:off off:on against:away_from in_the_back_of:in_the_front_of in_back_of:in_front_of "
    "on_the_back_of:on_the_front_of ahead_of:behind within:outside on_the_side_of:on_top_of"
)

#: Kinds whose substitutes come ONLY from :data:`OPPOSITES` (no random member of the kind).
_OPPOSITE_ONLY_KINDS = frozenset({"size", "state", "person", "spatial"})

#: Interaction verbs: base -> (3rd person singular, -ing, past, past participle).
VERB_FORMS: dict[str, tuple[str, str, str, str]] = {
    b: (s, g, p, pp)
    for b, s, g, p, pp in (
        ln.split()
        for ln in """hold holds holding held held
carry carries carrying carried carried
ride rides riding rode ridden
eat eats eating ate eaten
throw throws throwing threw thrown
catch catches catching caught caught
push pushes pushing pushed pushed
pull pulls pulling pulled pulled
chase chases chasing chased chased
watch watches watching watched watched
kick kicks kicking kicked kicked
hit hits hitting hit hit
feed feeds feeding fed fed
wear wears wearing wore worn
drive drives driving drove driven
fly flies flying flew flown
lick licks licking licked licked
bite bites biting bit bitten
hug hugs hugging hugged hugged
touch touches touching touched touched
grab grabs grabbing grabbed grabbed
wash washes washing washed washed
cut cuts cutting cut cut
pet pets petting petted petted
lift lifts lifting lifted lifted
drop drops dropping dropped dropped
follow follows following followed followed
lead leads leading led led
swing swings swinging swung swung
walk walks walking walked walked
use uses using used used
read reads reading read read""".splitlines()
    )
}

#: Interaction verb -> physically sensible substitutes (kept to the same kind of object).
VERB_SUBSTITUTES: dict[str, tuple[str, ...]] = _pairs(
    "hold:throw,drop,carry carry:drop,throw,push throw:catch,hold catch:throw,kick push:pull pull:push "
    "grab:drop,throw lift:drop drop:lift,hold ride:feed,pet,walk,push feed:ride,pet,chase pet:feed,chase "
    "walk:ride,feed chase:follow,lead follow:chase,lead lead:follow,chase eat:cut,hold,drop cut:eat,hold "
    "wear:hold,carry watch:touch,use use:watch,carry kick:throw,catch,hold hit:catch,throw swing:hold,drop "
    "drive:wash,push wash:drive,push fly:hold,carry lick:bite,hold bite:lick,hold hug:push,pull "
    "touch:push,wash read:hold,carry"
)


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
    """Give ``word`` the case of ``template``'s first letter."""
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


class LexicalRewriter:
    """Offline rewriter: replace the keyword with a same-kind word (implements :class:`Rewriter`).

    Substitutes by type (hand lists in this module):

    * attribute: colour -> another colour, material -> another material, number -> another number
      (2–10; "one" has none, to keep the noun's number), shape -> another shape, size and state -> an
      opposite ("large" -> "small", "empty" -> "full", "sliced" -> "whole");
    * relation: spatial phrases and prepositions -> their opposite ("to the left of" -> "to the right of",
      "under" -> "on", "in front of" -> "behind"); interaction verbs -> another verb in the same form
      ("holding" -> "throwing");
    * object: a word of the same kind (animals, vehicles, food, furniture, kitchenware, shapes, ...); people
      -> the opposite gender/age ("man" -> "woman"). Plurals stay plural.

    The first letter's case is kept and an adjacent "a"/"an" is fixed. The choice among several substitutes
    is drawn from a ``random.Random`` seeded by (seed, caption, span), so a request's result does not depend
    on its batch or position. Every output passes :func:`validate_rewrite`.

    Args:
        seed: seed of the per-request choices.
        vocabulary: optional ``{kind: [words]}`` (e.g. the scene world's ``size`` / ``colour`` / ``material``
            / ``shape`` / ``relation`` words). When given, a keyword is only rewritten if it is in one of
            the lists, and only into another word of the same list (an opposite from :data:`OPPOSITES` when
            the list has one).

    Raises:
        ValueError: if ``vocabulary`` has an empty word or a word listed under two kinds.
    """

    def __init__(self, seed: int = 0, vocabulary: Mapping[str, Sequence[str]] | None = None) -> None:
        self.seed = seed
        self.vocabulary: dict[str, tuple[str, ...]] | None = None
        self._vocab_index: dict[str, str] = {}
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

    def rewrite(self, requests: list[RewriteRequest]) -> list[RewriteResult]:
        """One :class:`RewriteResult` per request, in order.

        Reasons for ``None``: ``"no_substitute"`` (the keyword is in no list, or the list offers nothing
        else), or a :func:`validate_rewrite` reason (should not happen; kept as a guard).

        Raises:
            TypeError: naming the index of an element that is not a :class:`RewriteRequest`.
        """
        out = []
        for k, req in enumerate(requests):
            if not isinstance(req, RewriteRequest):
                raise TypeError(f"rewrite: requests[{k}] is a {type(req).__name__}, expected RewriteRequest")
            out.append(self._rewrite_one(req))
        return out

    # -- internals ---------------------------------------------------------------------------------------
    def _rng(self, req: RewriteRequest) -> random.Random:
        return random.Random(f"{self.seed}\x1f{req.caption}\x1f{req.start}\x1f{req.end}")

    def _substitutes(self, req: RewriteRequest) -> tuple[list[str], bool]:
        """Substitute words for the keyword (lower-case, singular) and whether the keyword was plural."""
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
            kind = index.get(form)
            if kind is None:
                continue
            plural = form != key and pluralize(form) == key
            if form != key and not plural:
                continue
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
        """Same-form substitutes of an interaction verb ("holding" -> ["throwing", "dropping", ...])."""
        word = req.keyword.lower()
        for base, forms in VERB_FORMS.items():
            all_forms = (base, *forms)
            if word in all_forms:
                slot = all_forms.index(word)
                subs = []
                for other in VERB_SUBSTITUTES.get(base, ()):
                    if other in VERB_FORMS:
                        subs.append((other, *VERB_FORMS[other])[slot])
                if self.vocabulary is not None:
                    subs = [s for s in subs if s in self._vocab_index]
                return subs
        return []

    def _phrase_relation_substitutes(self, req: RewriteRequest) -> list[str]:
        """With a vocabulary, a multi-word spatial phrase ("to the left of") is rewritten to an opposite phrase
        ("to the right of") whose new words are all vocabulary words (so a scene can render it)."""
        key = _WS.sub(" ", req.keyword.strip()).lower()
        if self.vocabulary is None or " " not in key:
            return []
        old = set(key.split(" "))
        return [o for o in OPPOSITES.get(key, ()) if set(o.split(" ")) - old
                and all(w in self._vocab_index for w in set(o.split(" ")) - old)]

    def _rewrite_one(self, req: RewriteRequest) -> RewriteResult:
        subs, plural = self._substitutes(req)
        if not subs and req.type == "relation":
            subs, plural = self._phrase_relation_substitutes(req), False
        if not subs and req.type == "relation":
            subs, plural = self._verb_substitutes(req), False
        if not subs:
            return RewriteResult(None, "no_substitute")
        choice = self._rng(req).choice(sorted(set(subs)))
        if plural:
            choice = pluralize(choice)
        choice = _match_case(req.keyword, choice)
        prefix = req.caption[: req.start]
        m = _ARTICLE_END.match(prefix)
        if m:
            old = m.group(2)
            new = indefinite_article(choice)
            new = _match_case(old, new)
            prefix = prefix[: m.start(2)] + new + prefix[m.end(2) :]
        negative = prefix + choice + req.caption[req.end :]
        reason = validate_rewrite(req.caption, req.start, req.end, negative)
        if reason is not None:
            return RewriteResult(None, reason)
        return RewriteResult(negative, None)
