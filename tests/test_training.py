"""Training loop: batch layout, learning-rate schedule, one AdamW step (clamp, clipping, non-finite guards), dvclive
logging, checkpoint round trip and the last good checkpoint after a non-finite loss (paper Sec. 3)."""

import math

import pytest
import torch
from PIL import Image

from concrete_jungle.losses import CementLoss, MarginConfig, build_loss
from concrete_jungle.models.build import build_model
from concrete_jungle.models.checkpoints import load_model, read_checkpoint, save_checkpoint
from concrete_jungle.params import LoopParams, ModelSpec
from concrete_jungle.training import (
    LOGIT_SCALE_MAX,
    AnchorDataset,
    ConcreteBatchDataset,
    NonFiniteLossError,
    collate_hard_negatives,
    cosine_lr,
    read_training_state,
    train_contrastive,
    train_step,
)


def _loop(**kw) -> LoopParams:
    """LoopParams with the trainer's new fields (checkpoint_every, distributed_loss) whether or not params.py has them."""
    extra = {k: kw.pop(k) for k in ("checkpoint_every", "distributed_loss") if k in kw and k not in LoopParams.model_fields}
    return LoopParams(**kw).model_copy(update=extra)


def test_cosine_lr_by_hand():
    assert cosine_lr(0, 100, 10, 1.0) == pytest.approx(0.1)
    assert cosine_lr(9, 100, 10, 1.0) == pytest.approx(1.0)
    assert cosine_lr(10, 100, 10, 1.0) == pytest.approx(1.0)
    assert cosine_lr(55, 100, 10, 1.0) == pytest.approx(0.5)
    assert cosine_lr(100, 100, 10, 1.0) == pytest.approx(0.0, abs=1e-12)


def test_collate_puts_anchors_first_then_hard_negatives():
    items = [(torch.full((1,), float(i)), torch.tensor([i]), torch.full((1,), 10.0 + i), torch.tensor([10 + i]),
              4.0 + i / 10, i != 1) for i in range(3)]
    b = collate_hard_negatives(items)
    assert b["images"][:, 0].tolist() == [0, 1, 2, 10, 11, 12]
    assert b["texts"][:, 0].tolist() == [0, 1, 2, 10, 11, 12]
    assert b["concreteness"].tolist() == pytest.approx([4.0, 4.1, 4.2])
    assert b["valid"].tolist() == [True, False, True]


def _toy_batch(tmp_path, n=8):
    recs = []
    for i in range(n):
        for kind, colour in (("a", (200, 30 * i, 0)), ("n", (0, 30 * i, 200))):
            Image.new("RGB", (64, 64), colour).save(tmp_path / f"{kind}{i}.png")
        recs.append({"image": str(tmp_path / f"a{i}.png"), "caption": f"a red square number {i}",
                     "negative_image": str(tmp_path / f"n{i}.png"),
                     "negative_caption": f"a blue square number {i}" if i else "a red square number 0",
                     "c_i": 3.5 + (i % 8) / 8})
    return recs


def test_train_logs_gradient_ratio_and_saves_loadable_checkpoint(tmp_path):
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32))
    ds = ConcreteBatchDataset(_toy_batch(tmp_path), bundle.preprocess_val, bundle.tokenizer)
    assert ds[0][-1] is False  # negative caption identical to the anchor's: masked, never pushed away
    loop = LoopParams(epochs=1, max_steps=2, batch_size=4, lr=1e-4, log_every=1, num_threads=1)
    ckpt = tmp_path / "model" / "checkpoint.pt"
    summary = train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=tmp_path / "live",
                                checkpoint_path=ckpt, params_dump={"x": 1}, save_checkpoint=save_checkpoint,
                                hard_negatives=True)
    assert summary["steps"] == 2
    assert 0.0 < summary["gradient_ratio"] < 1.0
    assert summary["logit_scale_exp"] == pytest.approx(math.exp(bundle.model.logit_scale.item()), rel=1e-5)
    tsv = (tmp_path / "live/plots/metrics/train/gradient_ratio.tsv").read_text().splitlines()
    assert tsv[0].split("\t")[:2] == ["step", "gradient_ratio"] and len(tsv) == 3
    assert float(tsv[-1].split("\t")[1]) == pytest.approx(summary["gradient_ratio"])
    scale_tsv = (tmp_path / "live/plots/metrics/train/logit_scale_exp.tsv").read_text().splitlines()
    assert scale_tsv[0] == "step\tlogit_scale_exp" and 1.0 <= float(scale_tsv[-1].split("\t")[1]) <= 100.0
    assert summary["grad_norm"] > 0 and summary["lr"] == pytest.approx(cosine_lr(1, 2, 0, 1e-4))
    assert read_checkpoint(ckpt)["complete"] is True and read_checkpoint(ckpt)["params"] == {"x": 1}
    reloaded = load_model(ckpt)
    tokens = bundle.tokenizer(["a red square"])
    bundle.model.eval()
    with torch.no_grad():
        assert torch.allclose(bundle.model.encode_text(tokens), reloaded.model.encode_text(tokens), atol=1e-6)


def test_negclip_trains_on_text_only_concretebatch(tmp_path):
    """NegCLIP uses no hard-negative image: with ``negative_images=False`` a text-only ConcreteBatch
    (``image_negatives: none``) trains with N image rows, and the weights equal those of training on the full
    2N-image layout (NegCLIP ignores image rows N..2N-1)."""
    from concrete_jungle.losses import NegCLIPLoss

    full = _toy_batch(tmp_path, 4)
    text_only = [{**r, "negative_image": None} for r in full]
    with pytest.raises(ValueError, match=r"record 0 .*lacks 'negative_image'.*negclip"):
        ConcreteBatchDataset(text_only, lambda im: im, lambda t: t)
    states = []
    for recs, neg_images in ((full, True), (text_only, False)):
        bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
        ds = ConcreteBatchDataset(recs, bundle.preprocess_val, bundle.tokenizer, negative_images=neg_images)
        item = ds[1]
        assert (item[2] is None) == (not neg_images) and item[3].shape == item[1].shape
        b = collate_hard_negatives([ds[i] for i in range(4)])
        assert b["images"].shape[0] == (8 if neg_images else 4) and b["texts"].shape[0] == 8
        loop = LoopParams(epochs=2, max_steps=2, batch_size=4, lr=1e-3, log_every=1, num_threads=1)
        summary = train_contrastive(bundle, ds, NegCLIPLoss(MarginConfig()), loop, seed=0,
                                    live_dir=tmp_path / f"live{neg_images}",
                                    checkpoint_path=tmp_path / f"run{neg_images}" / "c.pt", params_dump={},
                                    save_checkpoint=save_checkpoint, hard_negatives=True)
        assert summary["steps"] == 2 and 0.0 < summary["gradient_ratio"] < 1.0
        states.append(bundle.model.state_dict())
    for k in states[0]:
        torch.testing.assert_close(states[0][k], states[1][k], rtol=1e-5, atol=1e-6, msg=k)
    mixed = [(torch.zeros(1), torch.tensor([0]), None, torch.tensor([1]), 4.0, True),
             (torch.zeros(1), torch.tensor([0]), torch.zeros(1), torch.tensor([1]), 4.0, True)]
    with pytest.raises(ValueError, match="1 of 2 items lack a hard-negative image"):
        collate_hard_negatives(mixed)


def test_non_finite_loss_stops_without_checkpoint(tmp_path):
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32))
    ds = ConcreteBatchDataset(_toy_batch(tmp_path, 4), bundle.preprocess_val, bundle.tokenizer)

    def nan_loss(*args, **kwargs):
        return {"contrastive_loss": torch.tensor(float("nan"), requires_grad=True)}

    loop = LoopParams(epochs=1, max_steps=1, batch_size=4, log_every=1, num_threads=1)
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(NonFiniteLossError, match="step 0"):
        train_contrastive(bundle, ds, nan_loss, loop, seed=0, live_dir=tmp_path / "live", checkpoint_path=ckpt,
                          params_dump={}, save_checkpoint=save_checkpoint, hard_negatives=True)
    assert not ckpt.exists()


def test_same_seed_gives_identical_weights(tmp_path):
    states = []
    for run in range(2):
        bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
        ds = ConcreteBatchDataset(_toy_batch(tmp_path, 4), bundle.preprocess_val, bundle.tokenizer)
        loop = LoopParams(epochs=1, max_steps=2, batch_size=2, log_every=1, num_threads=1)
        # separate folders: the second run must not resume from the first one's training state
        train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=tmp_path / f"live{run}",
                          checkpoint_path=tmp_path / f"run{run}" / "c.pt", params_dump={},
                          save_checkpoint=save_checkpoint, hard_negatives=True)
        states.append(bundle.model.state_dict())
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


# ------------------------------------------------------------------------------------------------ train_step
class _Toy(torch.nn.Module):
    """A linear two-tower CLIP stand-in (open_clip output dict: normalised features, exponentiated scale)."""

    def __init__(self, raw_scale: float = math.log(10.0)):
        super().__init__()
        torch.manual_seed(0)
        self.visual, self.text = torch.nn.Linear(6, 4), torch.nn.Linear(5, 4)
        self.logit_scale = torch.nn.Parameter(torch.tensor(raw_scale))

    def forward(self, images, texts):
        return {"image_features": torch.nn.functional.normalize(self.visual(images), dim=-1),
                "text_features": torch.nn.functional.normalize(self.text(texts), dim=-1),
                "logit_scale": self.logit_scale.exp()}


def _toy_step_batch():
    g = torch.Generator().manual_seed(1)
    return {"images": torch.randn(6, 6, generator=g), "texts": torch.randn(6, 5, generator=g),
            "concreteness": torch.tensor([3.0, 4.0, 5.0]), "valid": torch.tensor([True, True, False])}


class _PaddedText(torch.nn.Module):
    """A text tower that masks padding (``config.pad_token_id`` 0, as open_clip's HFTextEncoder): mean of the
    embeddings of the non-pad tokens; records the width of the tokens it was fed."""

    def __init__(self):
        super().__init__()
        self.config, self.widths = type("Config", (), {"pad_token_id": 0})(), []
        self.embed = torch.nn.Embedding(10, 4)

    def forward(self, tokens):
        self.widths.append(tokens.shape[1])
        mask = (tokens != 0).unsqueeze(-1).float()
        return (self.embed(tokens) * mask).sum(1) / mask.sum(1)


def test_train_step_feeds_a_padding_masking_tower_the_batch_cut_after_its_longest_caption():
    batch = {**_toy_step_batch(), "texts": torch.tensor([[3, 4, 0, 0, 0, 0]] * 5 + [[5, 6, 7, 0, 0, 0]])}
    losses = []
    for cut in (True, False):
        model = _Toy()
        model.text = _PaddedText()
        if not cut:  # the same tower seen as one that does not mask padding: fed all 6 columns
            model.text.config = None
        out = train_step(model, batch, CementLoss(MarginConfig()), torch.optim.AdamW(model.parameters(), lr=1e-3),
                         lr=1e-3, step=0, hard_negatives=True)
        assert model.text.widths == [3 if cut else 6]
        losses.append(float(out["loss"]))
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)


def test_train_step_copies_the_whole_token_tensor_and_cuts_it_after_the_copy():
    """A slice is not contiguous: copied from pinned memory it would go through pageable memory and wait for the
    device. The step copies the whole (contiguous) tensor and cuts it after the copy."""
    texts = torch.tensor([[3, 4, 0, 0, 0, 0]] * 5 + [[5, 6, 7, 0, 0, 0]])
    copied, to = [], texts.to
    texts.to = lambda *args, **kwargs: (copied.append(kwargs.get("non_blocking")), to(*args, **kwargs))[1]
    model = _Toy()
    model.text = _PaddedText()
    train_step(model, {**_toy_step_batch(), "texts": texts}, CementLoss(MarginConfig()),
               torch.optim.AdamW(model.parameters(), lr=1e-3), lr=1e-3, step=0, hard_negatives=True)
    assert copied == [True] and model.text.widths == [3]  # the whole tensor's own .to, asynchronous; then cut


def test_train_step_clamps_the_raw_logit_scale_to_ln_100():
    model = _Toy(raw_scale=5.0)  # exp(5) = 148 > 100
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = train_step(model, _toy_step_batch(), CementLoss(MarginConfig()), opt, lr=1e-3, step=0,
                     hard_negatives=True)
    assert model.logit_scale.item() == pytest.approx(math.log(100.0), rel=1e-7) == LOGIT_SCALE_MAX
    assert opt.param_groups[0]["lr"] == 1e-3 and out["grad_norm"] is None and math.isfinite(out["loss"].item())


def test_train_step_reports_the_norm_before_clipping_and_clips_to_grad_clip():
    batch, loss_fn = _toy_step_batch(), CementLoss(MarginConfig())
    ref = _Toy()
    o = ref(batch["images"], batch["texts"])
    loss_fn(o["image_features"], o["text_features"], o["logit_scale"], concreteness=batch["concreteness"],
            hard_negative_valid=batch["valid"])["contrastive_loss"].backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in ref.parameters()))
    model = _Toy()
    out = train_step(model, batch, loss_fn, torch.optim.AdamW(model.parameters(), lr=1e-3), lr=1e-3, step=0,
                     hard_negatives=True, grad_clip=1e-3)
    assert out["grad_norm"].item() == pytest.approx(norm.item(), rel=1e-5) and norm.item() > 1e-2
    clipped = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    assert clipped.item() == pytest.approx(1e-3, rel=1e-4)


def test_train_step_refuses_a_non_finite_gradient_and_leaves_the_weights():
    def finite_loss_infinite_grad(img, txt, scale, **kwargs):
        return {"contrastive_loss": (img.sum() * 0.0).abs().sqrt()}  # value 0, d sqrt(u)/du at 0 = inf

    model = _Toy()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(NonFiniteLossError, match="non-finite gradient norm nan at step 7"):
        train_step(model, _toy_step_batch(), finite_loss_infinite_grad, torch.optim.AdamW(model.parameters()),
                   lr=1e-3, step=7, hard_negatives=True, grad_clip=1.0)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


class _NanAtCall:
    """Cement loss whose call number ``at`` (0-based step) returns NaN."""

    def __init__(self, at: int):
        self.inner, self.at, self.calls = CementLoss(MarginConfig()), at, 0

    def __call__(self, *args, **kwargs):
        out = self.inner(*args, **kwargs)
        self.calls += 1
        if self.calls == self.at + 1:
            return {"contrastive_loss": out["contrastive_loss"] * float("nan")}
        return out


def test_non_finite_loss_after_a_checkpoint_leaves_the_last_good_one(tmp_path):
    recs = _toy_batch(tmp_path, 4)
    loop = _loop(epochs=2, batch_size=2, log_every=1, num_threads=1, checkpoint_every=2)
    at_step_2 = {}

    def remember(step):
        if step == 2:
            at_step_2.update({k: v.clone() for k, v in bundle.model.state_dict().items()})

    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(recs, bundle.preprocess_val, bundle.tokenizer)
    train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=tmp_path / "clean" / "live",
                      checkpoint_path=tmp_path / "clean" / "checkpoint.pt", params_dump={"run": 1},
                      save_checkpoint=save_checkpoint, hard_negatives=True, on_step_end=remember)

    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(recs, bundle.preprocess_val, bundle.tokenizer)
    out = tmp_path / "nan"
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss nan at step 3 of .*live; the last good checkpoint "
                                                 r"is .*checkpoint\.pt with state .*state\.pt at step 2"):
        train_contrastive(bundle, ds, _NanAtCall(3), loop, seed=0, live_dir=out / "live",
                          checkpoint_path=out / "checkpoint.pt", params_dump={"run": 1},
                          save_checkpoint=save_checkpoint, hard_negatives=True)
    ckpt, state = read_checkpoint(out / "checkpoint.pt"), read_training_state(out / "state.pt")
    assert (ckpt["step"], ckpt["complete"], ckpt["params"]) == (2, False, {"run": 1})
    assert (state["step"], state["complete"]) == (2, False)
    assert all(torch.equal(ckpt["state_dict"][k], v) for k, v in at_step_2.items())
    assert all(torch.equal(state["model"][k], v) for k, v in at_step_2.items())
    assert len((out / "live/plots/metrics/train/loss.tsv").read_text().splitlines()) == 1 + 3  # steps 1-3 logged


def test_pairs_without_hard_negatives_train_with_the_clip_baseline(tmp_path):
    recs = [{"image": r["image"], "anchor": r["caption"], "captions": [r["caption"], r["negative_caption"]]}
            for r in _toy_batch(tmp_path, 4)]
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = AnchorDataset(recs, bundle.preprocess_val, bundle.tokenizer, caption="random", seed=0)
    summary = train_contrastive(bundle, ds, build_loss("clip"), _loop(epochs=2, batch_size=2, log_every=1,
                                num_threads=1, checkpoint_every=3), seed=0, live_dir=tmp_path / "live",
                                checkpoint_path=tmp_path / "m" / "checkpoint.pt", params_dump={},
                                save_checkpoint=save_checkpoint, hard_negatives=False)
    # 4 pairs, N = 2: 2 steps an epoch; clip has no hard negatives (ratio 0, every push on easy negatives)
    assert summary["steps"] == 4 and summary["gradient_ratio"] == 0.0 and summary["easy_negative_share"] == 1.0
    assert read_training_state(tmp_path / "m" / "state.pt")["epoch"] == 2


# ------------------------------------------------------------------------------------------------ input pipeline
def _six_records(tmp_path):
    """6 ConcreteBatch records whose anchors are squares on white (random crops move them: the RNG matters)."""
    recs = []
    for i in range(6):
        for kind, colour in (("a", (200, 40 * i, 0)), ("n", (0, 40 * i, 200))):
            im = Image.new("RGB", (64, 64), (255, 255, 255))
            im.paste(colour, (8 + 4 * i, 16, 40 + 4 * i, 48))
            im.save(tmp_path / f"sq_{kind}{i}.png")
        recs.append({"image": str(tmp_path / f"sq_a{i}.png"), "caption": f"a red square number {i}",
                     "negative_image": str(tmp_path / f"sq_n{i}.png"),
                     "negative_caption": f"a blue square number {i}" if i != 4 else "a red square number 4",
                     "c_i": 3.6 + i / 10})
    return recs


def test_resumable_batches_follow_the_sampler_order_from_a_position():
    """Epoch e's order is randperm(len) of a generator seeded with seed + e (DistributedSampler, one rank); batch b
    takes positions [b*n, (b+1)*n); a start at (epoch 1, batch 1) yields the rest of epoch 1, then epoch 2."""
    from concrete_jungle.distributed import DistContext, anchor_sampler
    from concrete_jungle.training import ResumableBatches

    sampler = anchor_sampler(list(range(6)), DistContext(), seed=7)
    perms = [torch.randperm(6, generator=torch.Generator().manual_seed(7 + e)).tolist() for e in range(3)]
    got = list(ResumableBatches(sampler, 2, 3, epoch=1, batch_pos=1, steps=4))
    assert got == [[(1, i) for i in perms[1][2:4]], [(1, i) for i in perms[1][4:6]],
                   [(2, i) for i in perms[2][0:2]], [(2, i) for i in perms[2][2:4]]]
    assert len(ResumableBatches(sampler, 2, 3, 0, 0, 5)) == 5
    with pytest.raises(ValueError, match="batch_pos=3"):
        ResumableBatches(sampler, 2, 3, 0, 3, 1)


def test_zero_workers_are_bit_identical_to_building_the_batches_by_hand(tmp_path):
    """The loader with 0 workers gives, bit for bit, the weights of the pre-DataLoader loop: per step
    ``collate([dataset[i] for i in order[b*n:(b+1)*n]])`` in the main process, random crops drawing from the global
    RNGs seeded as the trainer seeds them, then :func:`train_step` (logged steps checked at once, the others
    deferred: the same arithmetic)."""
    import random as pyrandom

    import numpy as np

    from concrete_jungle.distributed import DistContext, anchor_sampler
    from concrete_jungle.training import build_optimizer

    recs = _six_records(tmp_path)
    loop = LoopParams(epochs=2, batch_size=2, lr=1e-3, warmup_frac=0.2, log_every=2, num_threads=1,
                      precision="fp32")  # the hand-made loop below autocasts as the spec says: fp32
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(recs, bundle.preprocess_train, bundle.tokenizer, cache=False)
    summary = train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=tmp_path / "live",
                                checkpoint_path=tmp_path / "m" / "c.pt", params_dump={},
                                save_checkpoint=save_checkpoint, hard_negatives=True, num_workers=0)
    ours = bundle.model.state_dict()

    hand = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(recs, hand.preprocess_train, hand.tokenizer, cache=False)
    torch.set_num_threads(1)
    torch.manual_seed(0), np.random.seed(0), pyrandom.seed(0)
    hand.model.train()
    opt = build_optimizer(hand.model, loop.lr, loop.weight_decay)
    sampler, loss_fn, total = anchor_sampler(ds, DistContext(), 0), CementLoss(MarginConfig()), 6
    step = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        order = list(sampler)
        for b in range(3):
            batch = collate_hard_negatives([ds[i] for i in order[b * 2:(b + 1) * 2]])
            train_step(hand.model, batch, loss_fn, opt, lr=cosine_lr(step, total, 1, loop.lr), step=step,
                       hard_negatives=True, grad_clip=loop.grad_clip, autocast=hand.autocast)
            step += 1
    assert summary["steps"] == 6
    assert all(torch.equal(ours[k], v) for k, v in hand.model.state_dict().items())


def test_workers_give_the_weights_and_curves_of_in_process_loading(tmp_path):
    """Deterministic preprocessing (decoded-input cache on, one cache per worker): 2 worker processes give the same
    batches in the same order as 0 workers, hence bit-identical weights and dvclive curves."""
    recs = _six_records(tmp_path)
    loop = LoopParams(epochs=2, batch_size=2, lr=1e-3, warmup_frac=0.2, log_every=2, num_threads=1)
    states, curves = [], []
    for workers in (0, 2):
        bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
        ds = ConcreteBatchDataset(recs, bundle.preprocess_val, bundle.tokenizer, cache=True)
        out = tmp_path / f"w{workers}"
        summary = train_contrastive(bundle, ds, CementLoss(MarginConfig()), loop, seed=0, live_dir=out / "live",
                                    checkpoint_path=out / "c.pt", params_dump={}, save_checkpoint=save_checkpoint,
                                    hard_negatives=True, num_workers=workers)
        assert summary["steps"] == 6 and summary["masked_hard_negatives"] in (0.0, 1.0)
        states.append(bundle.model.state_dict())
        curves.append({p.name: p.read_text() for p in sorted((out / "live/plots/metrics/train").glob("*.tsv"))})
        assert (ds._images is None) == (workers > 0)  # with workers the main process decodes nothing
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert curves[0] == curves[1] and "gradient_ratio.tsv" in curves[0]


def test_worker_items_are_seeded_by_seed_epoch_and_index_only(tmp_path):
    """In a worker, item (epoch, i) is drawn after seeding from (seed, epoch, i): the same crop whatever was drawn
    before; in the main process the global RNG is used as it is."""
    from unittest import mock

    from concrete_jungle.datasets import _EpochItems

    recs = _six_records(tmp_path)
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    items = _EpochItems(ConcreteBatchDataset(recs, bundle.preprocess_train, bundle.tokenizer, cache=False), seed=3)
    with mock.patch("concrete_jungle.datasets.get_worker_info", return_value=object()):
        a = items[(1, 2)][0]
        torch.rand(5)  # other draws in between
        items[(0, 4)]
        b = items[(1, 2)][0]
        other_epoch = items[(2, 2)][0]
    assert torch.equal(a, b) and not torch.equal(a, other_epoch)
    torch.manual_seed(0)
    c = items[(1, 2)][0]
    d = items[(1, 2)][0]
    assert not torch.equal(c, d)  # main process: successive global-RNG draws


# ------------------------------------------------------------------------------------------------ deferred guard
def test_train_step_without_check_reports_non_finite_as_a_device_flag():
    def nan_loss(img, txt, scale, **kwargs):
        return {"contrastive_loss": img.sum() * float("nan")}

    model = _Toy()
    out = train_step(model, _toy_step_batch(), nan_loss, torch.optim.AdamW(model.parameters()), lr=1e-3, step=4,
                     hard_negatives=True, grad_clip=1.0, check_finite=False)
    assert out["finite"].dtype == torch.bool and out["finite"].item() is False and out["stats"] is None
    ok = train_step(_Toy(), _toy_step_batch(), CementLoss(MarginConfig()), torch.optim.AdamW(_Toy().parameters()),
                    lr=1e-3, step=0, hard_negatives=True, check_finite=False, return_stats=True)
    assert ok["finite"].item() is True and 0.0 < ok["stats"]["gradient_ratio"].item() < 1.0


def test_non_finite_loss_between_log_steps_is_named_at_the_next_checkpoint(tmp_path):
    """log_every large (no log step before the end), checkpoint_every 2: a NaN loss at step 2 is found by the
    check before the checkpoint of step 4; the error names step 2, the checkpoint of step 2 stays the last one."""
    recs = _toy_batch(tmp_path, 4)
    loop = _loop(epochs=3, batch_size=2, log_every=100, num_threads=1, checkpoint_every=2)
    at_step_2 = {}

    def remember(step):
        if step == 2:
            at_step_2.update({k: v.clone() for k, v in bundle.model.state_dict().items()})

    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(recs, bundle.preprocess_val, bundle.tokenizer)
    out = tmp_path / "nan"
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss nan at step 2 \(found at the check after step 3\) "
                                                 r"of .*live; the last good checkpoint is .*checkpoint\.pt with state "
                                                 r".*state\.pt at step 2"):
        train_contrastive(bundle, ds, _NanAtCall(2), loop, seed=0, live_dir=out / "live",
                          checkpoint_path=out / "checkpoint.pt", params_dump={"run": 1},
                          save_checkpoint=save_checkpoint, hard_negatives=True, on_step_end=remember)
    ckpt, state = read_checkpoint(out / "checkpoint.pt"), read_training_state(out / "state.pt")
    assert (ckpt["step"], state["step"], ckpt["complete"]) == (2, 2, False)
    assert all(torch.equal(ckpt["state_dict"][k], v) for k, v in at_step_2.items())
    assert not (out / "live/plots/metrics/train/loss.tsv").exists()  # nothing logged, nothing non-finite logged


def test_a_non_log_step_of_train_step_reads_nothing_back_from_the_device(monkeypatch):
    """Every host read of a tensor value (``item``, ``tolist``, ``bool``, ``float``, ``int``) made by this package's
    code during a non-logged step (``return_stats=False, check_finite=False``) and the deferred guard's update is
    counted: none, except the c_i value check on the CPU batch tensor. A logged step reads values."""
    import sys

    from concrete_jungle.training import _DeferredGuard

    calls = []
    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def spy(self, *a, _original=original, _name=name, **k):
            frame = sys._getframe(1)
            if "concrete_jungle" in frame.f_code.co_filename and frame.f_code.co_name != "_check_concreteness":
                calls.append((_name, frame.f_code.co_name))
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, spy)
    model = _Toy()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    guard = _DeferredGuard(torch.device("cpu"))
    out = train_step(model, _toy_step_batch(), CementLoss(MarginConfig()), opt, lr=1e-3, step=0,
                     hard_negatives=True, grad_clip=1.0, check_finite=False)
    guard.update(0, out)
    assert calls == []
    train_step(model, _toy_step_batch(), CementLoss(MarginConfig()), opt, lr=1e-3, step=1, hard_negatives=True,
               grad_clip=1.0, check_finite=True, return_stats=True)
    assert {c[1] for c in calls} == {"train_step"}  # the immediate loss / gradient-norm checks of a logged step
