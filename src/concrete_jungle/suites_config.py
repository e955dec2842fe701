"""Typed config of the evaluation suites: the ``evaluate`` section of every params file (paper Sec. 3, Tab. 2 and 3).

``evaluate.precision`` is the encoding precision of every benchmark (fp32 unless set; never the training
precision); one sub-section per suite: ``winoground``, ``retrieval`` (sets), ``probe`` (tasks, VTAB-1k protocol) and
``heldout`` (concreteness bins). Validated with the rest of the params by :func:`concrete_jungle.params.load_params`;
imports no torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from concrete_jungle.config_base import CONC_MAX, CONC_MIN, _reject_blank, _require_fields, _Section

__all__ = ["WinogroundParams", "RetrievalSet", "RetrievalParams", "ProbeTask", "PROBE_C_BOUNDS", "ProbeParams",
           "HeldoutParams", "PositiveControlParams", "EvaluateParams"]


class WinogroundParams(_Section):
    """Winoground (Thrush et al. 2022; paper Tab. 2): ``scene_world`` generates pairs of scenes that differ by
    swapping roles or attributes; ``hf`` reads the Hugging Face release folder ``dir`` (``data/test-*.parquet`` or
    ``examples.jsonl`` + ``images/``); ``none`` skips the suite (recorded with its reason)."""

    source: Literal["scene_world", "hf", "none"] = "none"
    n_items: int = Field(400, ge=1)  # scene_world: items (each two scenes and two captions)
    dir: str | None = None  # hf: the release folder
    meta_csv: str | None = None  # per-id tags (Relation / Object / Both): ../shared/data/winoground/winoground_meta.csv
    diwan_tags: str | None = None  # Diwan et al. (2022) per-id tags (diwan_new_tag_assignments.json)

    _not_blank = field_validator("dir", "meta_csv", "diwan_tags")(_reject_blank)

    @model_validator(mode="after")
    def _source_has_data(self):
        if self.source == "hf" and self.dir is None:
            raise ValueError("evaluate.winoground.dir must name the Winoground folder when source is 'hf'")
        return self


class RetrievalSet(_Section):
    """One image-text retrieval set: every caption of each image is a positive (paper Tab. 3: Flickr30k)."""

    format: Literal["scene_world", "flickr30k_karpathy", "coco_karpathy", "flickr8k", "coco_captions"]
    n_images: int | None = Field(None, ge=2)  # scene_world: held-out scenes; others: cap on the images (None = all)
    dataset_json: str | None = None  # *_karpathy: dataset_flickr30k.json / dataset_coco.json
    image_root: str | None = None  # *_karpathy, coco_captions: the image folder
    split: str = "test"  # *_karpathy: the Karpathy split
    token_file: str | None = None  # flickr8k: Flickr8k.token.txt
    split_file: str | None = None  # flickr8k: Flickr_8k.testImages.txt
    image_dir: str | None = None  # flickr8k: the image folder
    captions_json: str | None = None  # coco_captions: captions_val2017.json
    filenames: str | None = None  # coco_captions: a file listing the images to use (one file name a line)

    _not_blank = field_validator("dataset_json", "image_root", "token_file", "split_file", "image_dir",
                                 "captions_json", "filenames")(_reject_blank)

    @model_validator(mode="after")
    def _format_fields(self):
        # the fields each format reads (concrete_jungle.evaluation.retrieval.prepare_retrieval); absent files, or all
        # of them null (a placeholder for data this machine lacks), make the set unavailable with the reason
        need = {"scene_world": ("n_images",), "flickr30k_karpathy": ("dataset_json", "image_root"),
                "coco_karpathy": ("dataset_json", "image_root"), "flickr8k": ("token_file", "split_file", "image_dir"),
                "coco_captions": ("captions_json", "image_root")}[self.format]
        _require_fields(self, need, f"a {self.format!r} retrieval set")
        return self


class RetrievalParams(_Section):
    sets: dict[str, RetrievalSet] = {}  # name (a plain file name: [A-Za-z0-9_.-]) -> set
    ks: list[int] = Field([1, 5, 10], min_length=1)

    @field_validator("sets")
    @classmethod
    def _set_names(cls, v):
        # a name names the set's item file (sets/<name>.json): a plain file name
        bad = [k for k in v if not (k[:1].isalnum() and all(c.isascii() and (c.isalnum() or c in "_.-") for c in k))]
        if bad:
            raise ValueError(f"evaluate.retrieval.sets: names must be plain file names ([A-Za-z0-9_.-]), got {bad}")
        return v

    @field_validator("ks")
    @classmethod
    def _positive_ks(cls, v):
        if any(k < 1 for k in v) or len(set(v)) != len(v):
            raise ValueError(f"evaluate.retrieval.ks must be distinct positive ints, got {v}")
        return sorted(v)


class ProbeTask(_Section):
    """One linear-probe task on frozen image features (paper Tab. 3: ImageNet-1k, COCO multi-label, VTAB-1k)."""

    format: Literal["scene_world", "imagefolder", "vtab1k", "coco_multilabel"]
    attribute: str | None = None  # scene_world: the label (shape, colour, size, material, position, count)
    root: str | None = None  # imagefolder: <root>/<class>/*.jpg; vtab1k: the task folder (train800val200.txt ...)
    test_root: str | None = None  # imagefolder: a separate test folder (None: a seeded split of root)
    instances_train: str | None = None  # coco_multilabel: instances_train2017.json (+ image_root)
    instances_val: str | None = None
    image_root: str | None = None
    group: str = "other"  # VTAB group (natural / specialized / structured), or the table column it goes to
    protocol: Literal["vtab1k", "full"] = "vtab1k"  # 1,000 training images (800/200 to choose C), or all
    test_size: int | None = Field(None, ge=1)  # cap on the test images (seeded sample); None = all
    test_image_root: str | None = None  # coco_multilabel: the folder of instances_val's images (None: image_root)

    _not_blank = field_validator("root", "test_root", "instances_train", "instances_val",
                                 "image_root", "test_image_root")(_reject_blank)

    @model_validator(mode="after")
    def _format_fields(self):
        # the fields each format reads (concrete_jungle.evaluation.linear_probe.prepare_probe); the attributes are
        # linear_probe.WORLD_ATTRIBUTES (tests/test_linear_probe.py checks they agree)
        if self.format == "scene_world":
            attrs = ("shape", "colour", "size", "material", "position", "count")
            if self.attribute not in attrs:
                raise ValueError(f"a scene_world probe task needs attribute one of {list(attrs)}, got "
                                 f"{self.attribute!r}")
            return self
        need = {"imagefolder": ("root",), "vtab1k": ("root",),
                "coco_multilabel": ("instances_train", "image_root")}[self.format]
        _require_fields(self, need, f"a {self.format!r} probe task")
        return self


#: The widest inverse L2 strength C the probes' search for C reaches (it widens ``evaluate.probe.Cs`` by factors of
#: 10 while the best C is an end of the grid: :func:`concrete_jungle.evaluation.linear_probe.select_c`).
PROBE_C_BOUNDS = (1e-6, 1e6)


def check_probe_cs(Cs, bounds: tuple[float, float] = PROBE_C_BOUNDS, key: str = "Cs") -> list[float]:
    """The probes' rule for a grid of C (inverse L2 strength), shared by ``evaluate.probe.Cs`` at start-up and by the
    scorer (:func:`concrete_jungle.evaluation.linear_probe.select_c`): a non-empty list of finite values within
    ``bounds`` (the widest C the search reaches), distinct as the metrics' keys are (``f"{C:g}"``, 6 significant
    digits: 1.0 and 1.0000001 would share "1").

    Returns: the Cs as floats, in the given order. Raises: ValueError naming ``key``, the rule and the grid.
    """
    lo, hi = bounds
    try:
        cs = [float(c) for c in Cs]
    except (TypeError, ValueError):
        cs = []
    if not cs or any(not lo <= c <= hi for c in cs) or len({f"{c:g}" for c in cs}) != len(cs):  # NaN fails lo <= c
        raise ValueError(f"{key} must be distinct values within {lo:g} .. {hi:g} (the widest C the probes' search "
                         f"reaches; distinct to 6 significant digits), got {list(Cs) if Cs is not None else Cs}")
    return cs


def world_task_conflict(attribute: str, world_cfg) -> str | None:
    """Why a ``scene_world`` probe task of ``attribute`` cannot be drawn from ``world_cfg`` (the params'
    WorldConfig), or None: the single-object attributes draw one-object scenes (``min_objects`` 1), ``count`` needs
    two object counts (``min_objects < max_objects``). The one rule of ``evaluation/linear_probe.py`` prepare_probe
    and of the pre-flight (stages/check_params.py, docs/instrument.md H27). Never raises."""
    if attribute == "count":
        return ("count needs world.min_objects < world.max_objects"
                if world_cfg.min_objects == world_cfg.max_objects else None)
    return None if world_cfg.min_objects == 1 else f"{attribute!r} needs single-object scenes (world.min_objects 1)"


class ProbeParams(_Section):
    """Logistic-regression probes (scikit-learn) with the regularisation chosen on the 800/200 split, then refit on
    all 1,000 (VTAB-1k protocol). ``Cs`` is the grid the search for C starts from: distinct positive values within
    :data:`PROBE_C_BOUNDS`, the scorer's own rule."""

    tasks: dict[str, ProbeTask] = {}  # name (a plain file name other than "groups") -> task
    train_size: int = Field(1000, ge=2)
    val_size: int = Field(200, ge=1)
    Cs: list[float] = Field([0.01, 0.1, 1.0, 10.0, 100.0], min_length=1)
    max_iter: int = Field(1000, ge=1)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _split(self):
        if self.val_size >= self.train_size:
            raise ValueError(f"evaluate.probe.val_size ({self.val_size}) must be < train_size ({self.train_size})")
        check_probe_cs(self.Cs, key="evaluate.probe.Cs")
        # a name names the task's item file (tasks/<name>.json) and a key beside "groups" in the probe metrics
        bad = [k for k in self.tasks if k == "groups" or not (
            k[:1].isalnum() and all(c.isascii() and (c.isalnum() or c in "_.-") for c in k))]
        if bad:
            raise ValueError(f"evaluate.probe.tasks: names must be plain file names ([A-Za-z0-9_.-]) other than "
                             f"'groups' (the key of the group means), got {bad}")
        return self


class HeldoutParams(_Section):
    """Held-out ConcreteBatch pairs (anchors never trained on) scored like SugarCrepe, per keyword type and
    concreteness bin (``../shared/notes/measuring-small-effects.md``)."""

    c_bins: list[float] = Field([1.0, 3.0, 4.0, 4.5, 5.0], min_length=2)  # Brysbaert 1-5 bin edges
    # text-side pairs (profiles with text_side.captions): the first so many eligible images; None: all
    max_text_pairs: int | None = Field(None, ge=1)

    @field_validator("c_bins")
    @classmethod
    def _edges(cls, v):
        # from 1 to 5: every pair's c_i (a rating in [1, 5], checked when the pairs are prepared) has a bin
        if sorted(v) != list(v) or len(set(v)) != len(v) or v[0] != CONC_MIN or v[-1] != CONC_MAX:
            raise ValueError(f"evaluate.heldout.c_bins must be increasing edges from {CONC_MIN:g} to {CONC_MAX:g} "
                             f"(the concreteness scale, so that every pair has a bin), got {v}")
        return v


class PositiveControlParams(_Section):
    """The study's positive control (:mod:`concrete_jungle.evaluation.positive_control`): the control arm of each
    ConcreteBatch (its fine-tune with a loss of ``control_losses``) must beat each baseline (``clip``) on the
    held-out pairs of its own ConcreteBatch; the other fine-tunes are treatments compared against it.

    Fields:
        control_losses: the losses whose fine-tunes are the control arms (``infonce``: the plainest hard-negative
            objective); non-empty, no repeats.
        min_gain: the gain in accuracy points (model minus baseline, paired on the same pairs) a control arm must
            reach, in I2T and in T2I (where the pairs have negative images), to pass.
        headroom_share: where the baseline leaves little room, the required gain is this share of the baseline's
            errors when that is less than ``min_gain`` (0.5: halve them); null: ``min_gain`` always.
        alpha: the exact McNemar p-value must be below it (two-sided) for the gain to count.
        power: the power at which the minimal detectable effect (MDE) of each comparison is stated, in [0.5, 1).
        bootstrap_resamples: resamples of the paired percentile bootstrap CI of each gain.
        confidence_level: of that CI.

    Raises:
        pydantic.ValidationError: a value out of range (the message names the field).
    """

    control_losses: list[str] = Field(default_factory=lambda: ["infonce"], min_length=1)
    min_gain: float = Field(10.0, ge=0.0, le=100.0)
    headroom_share: float | None = Field(0.5, gt=0.0, le=1.0)
    alpha: float = Field(0.001, gt=0.0, lt=1.0)
    power: float = Field(0.8, ge=0.5, lt=1.0)
    bootstrap_resamples: int = Field(2000, ge=1)
    confidence_level: float = Field(0.95, gt=0.0, lt=1.0)

    @field_validator("control_losses")
    @classmethod
    def _no_repeats(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"evaluate.positive_control.control_losses repeats a loss: {v}")
        return v


class EvaluateParams(_Section):
    batch_size: int = Field(128, ge=1)
    precision: Literal["fp32", "bf16"] = "fp32"  # encoding precision of every benchmark (never the training's)
    winoground: WinogroundParams = WinogroundParams()
    retrieval: RetrievalParams = RetrievalParams()
    probe: ProbeParams = ProbeParams()
    heldout: HeldoutParams = HeldoutParams()
    positive_control: PositiveControlParams = PositiveControlParams()
