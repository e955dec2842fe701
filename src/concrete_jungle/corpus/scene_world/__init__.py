"""The embedded scene world: a small synthetic image-caption world drawn with Pillow.

No pretrained CLIP exists offline, so the default ``world`` profile trains and evaluates on scenes of
1-3 coloured, textured shapes laid out on a coarse grid (default 2 x 2 cells on a 64 px canvas), so that
the spatial relations left / right / above / below / next to are easy to see. Every object has four
attributes: shape (object word), colour, size (small / large) and material (a visible texture; the
value ``"plain"`` is never mentioned in captions).

This package re-exports nothing: import from the submodule that holds a name, so that importing one part
of the world loads only what that part needs (data formats: ``docs/architecture.md``).

* :mod:`.graph` - the JSON-serialisable scene graph (``Scene``, ``WorldObject``, ``scene_signature``,
  ``validate_scene``), spatial relations (``RELATION_WORDS``, ``relation_between``, ``relation_holds``),
  random scenes (``sample_scene``, ``scene_rng`` on disjoint corpus / benchmark seed streams), the world's
  words by kind (``world_vocabulary``) and ``edit_scene``, which applies a one-slot caption rewrite to the
  scene graph so that a ConcretePlant hard negative caption t'_i can be re-rendered as a hard negative
  image v'_i (Paper Sec. 2.2, the role SDXL-Turbo plays in the paper);
* :mod:`.render` - ``render_scene``: deterministic Pillow rendering of a scene graph (shapes, textures);
* :mod:`.captions` - caption structures and templates (``CaptionSpec``, ``Mention``, ``Caption`` with
  **slots**: character spans tied to scene elements), ``realize_caption`` / ``parse_caption``,
  ``spec_holds`` / ``caption_holds`` (truth of a caption for a scene), ``scene_captions``,
  ``select_anchor`` (Paper Appendix A.1: the longest caption is the anchor) and the Brysbaert
  concreteness of every world word (``WORD_CONCRETENESS``);
* :mod:`.corpus` - ``generate_corpus``: manifest records and PNGs of the training corpus;
* :mod:`.benchmark` - ``generate_benchmark``: SugarCrepe-format JSON of seven subsets
  (``SUGARCREPE_SUBSETS``) on scenes disjoint from the corpus's.

The configuration (``WorldConfig``, ``SUPPORTED_SHAPES``, ``SUPPORTED_MATERIALS``) lives in
:mod:`concrete_jungle.params`. Dependencies run one way: ``graph`` <- ``render``, ``captions`` <-
``corpus``, ``benchmark``.
"""
