"""Learning curves on held-out pairs: accuracy of the model being fine-tuned, every few steps, on the held-out
ConcreteBatch pairs (anchors never trained on; scored as :mod:`concrete_jungle.evaluation.heldout` scores them), by
keyword type. A training-time module: it imports nothing from ``evaluation`` so that the training stages do not
depend on the evaluation code.

They show when the hard negatives are learned and whether training saturates — the positive control's question
asked along the way (:mod:`concrete_jungle.evaluation.positive_control`). The trainer calls a
:class:`HeldoutCurve` after every step; every ``every`` steps (and before the first, step 0 = the starting model,
and after the last) it
encodes the pairs in eval mode, without gradients, in the evaluation precision, and writes each series as a dvclive
TSV (``step<TAB><name>``) under ``<live_dir>/plots/metrics/heldout/<dataset>/<group>_<direction>.tsv``, so that
``dvc plots show`` draws them beside the training curves. (A resumed run has step 0 and the points from its resume step
on: the points in between are not measured again.) Nothing in the evaluation touches the training: the RNG
states and every module's train / eval flag are restored, so a run with curves trains bit-identically to one without.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import torch

from concrete_jungle.io import atomic_write, load_rgb
from concrete_jungle.models.encoding import cut_padding, text_pad_id

__all__ = ["CURVE_DIR", "HeldoutCurve", "curve_groups", "read_curves"]

#: Where the curves sit inside a dvclive folder.
CURVE_DIR = Path("plots") / "metrics" / "heldout"
_TYPES = ("attribute", "relation", "object")


def curve_groups(pairs: Sequence[Mapping]) -> list[str]:
    """The series of one dataset's pairs: ``all`` then each keyword type present, in paper order."""
    present = {p["type"] for p in pairs}
    return ["all", *(t for t in _TYPES if t in present)]


@contextlib.contextmanager
def _untouched(model: torch.nn.Module) -> Iterator[None]:
    """Run a block in eval mode and no-grad, then restore every module's own train / eval flag (frozen BatchNorm
    statistics of a locked tower stay in eval) and every RNG the trainer draws from."""
    flags = [(m, m.training) for m in model.modules()]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        import random

        import numpy as np

        py, npy = random.getstate(), np.random.get_state()
        model.eval()
        try:
            yield
        finally:
            for m, flag in flags:
                m.training = flag
            random.setstate(py)
            np.random.set_state(npy)


class HeldoutCurve:
    """``on_step_end`` hook of :func:`concrete_jungle.training.train_contrastive` that logs held-out accuracy.

    Args:
        bundle: the :class:`~concrete_jungle.models.build.ModelBundle` being trained (its model is evaluated in place).
        pairs: ``{dataset: [held-out pair with image, caption, negative_caption, negative_image?, type]}``: the
            model's own dataset for a hard-negative fine-tune, every dataset for a baseline.
        live_dir: the run's dvclive folder.
        every: evaluate every ``every`` steps (>= 1); :meth:`finish` adds the last step.
        precision: encoding precision (``evaluate.precision``; fp32 unless params say otherwise).
        batch_size: encoding batch size.
        is_main: only the main process evaluates and writes (under torchrun, rank 0).

    Raises:
        ValueError: ``every`` < 1; a pair lacking a field (named).
    """

    def __init__(self, bundle, pairs: Mapping[str, Sequence[Mapping]], live_dir: str | os.PathLike, *, every: int,
                 precision: str = "fp32", batch_size: int = 256, is_main: bool = True) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"HeldoutCurve: every must be an int >= 1, got {every!r}")
        for d, ps in pairs.items():
            for k, p in enumerate(ps):
                missing = [f for f in ("image", "caption", "negative_caption", "type") if p.get(f) is None]
                if missing:
                    raise ValueError(f"HeldoutCurve: held-out pair {k} of {d} lacks {missing}")
        self.bundle, self.every, self.precision = bundle, every, precision
        self.batch_size, self.is_main = batch_size, is_main
        self.pairs = {d: list(ps) for d, ps in pairs.items() if ps}
        self.folder = Path(live_dir) / CURVE_DIR
        self.rows: dict[tuple[str, str], list[tuple[int, float]]] = {}
        self._images: dict[str, torch.Tensor] = {}  # decoded, preprocessed once

    def _pixels(self, paths: Sequence[str]) -> torch.Tensor:
        key = "\0".join(paths)
        if key not in self._images:
            self._images[key] = torch.stack([self.bundle.preprocess_val(load_rgb(p)) for p in paths])
        return self._images[key]

    def _encode(self, pixels: torch.Tensor | None, texts: Sequence[str] | None) -> torch.Tensor:
        model, dev, out = self.bundle.model, self.bundle.device, []
        n = len(pixels) if pixels is not None else len(texts)
        spec = self.bundle.spec
        self.bundle.spec = spec.model_copy(update={"precision": self.precision})
        try:
            for s in range(0, n, self.batch_size):
                with self.bundle.autocast():
                    if pixels is not None:
                        f = model.encode_image(pixels[s:s + self.batch_size].to(dev))
                    else:
                        tokens = self.bundle.tokenizer(list(texts[s:s + self.batch_size]))
                        f = model.encode_text(cut_padding(tokens, text_pad_id(model)).to(dev))
                out.append(torch.nn.functional.normalize(f.float(), dim=-1).cpu())
        finally:
            self.bundle.spec = spec
        return torch.cat(out)

    def evaluate(self) -> dict[str, dict[str, float]]:
        """Accuracy now: ``{dataset: {"<group>_i2t": acc, "<group>_t2i": acc}}`` (fractions; T2I where every pair
        has a negative image), the model left exactly as it was."""
        out = {}
        with _untouched(self.bundle.model):
            for d, ps in self.pairs.items():
                v = self._encode(self._pixels([p["image"] for p in ps]), None)
                t = self._encode(None, [p["caption"] for p in ps])
                tn = self._encode(None, [p["negative_caption"] for p in ps])
                # the verdicts of score_heldout (evaluation.heldout.heldout_verdicts): cosine, strict, a tie is wrong
                verdicts = {"i2t": ((v * t).sum(1) > (v * tn).sum(1)).numpy()}
                if all(p.get("negative_image") for p in ps):
                    vn = self._encode(self._pixels([p["negative_image"] for p in ps]), None)
                    verdicts["t2i"] = ((t * v).sum(1) > (t * vn).sum(1)).numpy()
                types = [p["type"] for p in ps]
                acc = {}
                for g in curve_groups(ps):
                    mask = [g == "all" or ty == g for ty in types]
                    for direction, hits in verdicts.items():
                        sel = hits[mask]
                        acc[f"{g}_{direction}"] = float(sel.mean())
                out[d] = acc
        return out

    def _record(self, step: int) -> None:
        for d, acc in self.evaluate().items():
            for name, value in acc.items():
                series = self.rows.setdefault((d, name), [])
                series[:] = [r for r in series if r[0] < step] + [(step, value)]  # a resumed run rewrites its tail

    def start(self) -> None:
        """Evaluate the model before its first step (step 0: the starting model); written with the first logged
        step, because dvclive clears its folder when the trainer opens it."""
        if self.is_main:
            self._record(0)

    def __call__(self, step: int) -> None:
        """After step ``step``: evaluate when it is a multiple of ``every`` and (re)write every series."""
        if self.is_main and step % self.every == 0:
            self._log(step)

    def finish(self, step: int) -> None:
        """After the last step: evaluate it unless it was just logged (call it once training returns)."""
        if self.is_main and step % self.every:
            self._log(step)

    def _log(self, step: int) -> None:
        self._record(step)
        for (d, name), series in self.rows.items():
            with atomic_write(self.folder / d / f"{name}.tsv") as fh:
                w = csv.writer(fh, delimiter="\t", lineterminator="\n")
                w.writerow(["step", name])
                w.writerows(series)


def read_curves(live_dir: str | os.PathLike) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """``{dataset: {"<group>_<direction>": [(step, accuracy), ...]}}`` from a run's dvclive folder (``{}`` when it
    logged none).

    Raises:
        ValueError: a TSV without the ``step`` column or with a non-finite value (named).
    """
    import math

    root = Path(live_dir) / CURVE_DIR
    out: dict = {}
    if not root.is_dir():
        return out
    for path in sorted(root.glob("*/*.tsv")):
        with path.open() as fh:
            rows = list(csv.reader(fh, delimiter="\t"))
        if not rows or rows[0][0] != "step":
            raise ValueError(f"{path}: no 'step' column")
        series = []
        for r in rows[1:]:
            value = float(r[1])
            if not math.isfinite(value):
                raise ValueError(f"{path}: non-finite accuracy at step {r[0]}")
            series.append((int(r[0]), value))
        out.setdefault(path.parent.name, {})[path.stem] = series
    return out
