"""Data-parallel training (paper Sec. 3 at scale): row bookkeeping, local-loss maths, and 2 gloo processes against
one process on the same global batch (loss, feature and parameter gradients, one AdamW step, a whole run)."""

from __future__ import annotations

import math
import os
import socket

import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.distributed import (
    DistContext,
    all_reduce_mean,
    distributed_contrastive_loss,
    gather_global_batch,
    global_row_index,
    init_distributed,
    local_rows_loss,
)
from concrete_jungle.losses import MarginConfig, NegCLIPLoss, build_loss, evaluate_loss, stats_to_floats

W = 2  # processes
N = 4  # anchors of the global batch (n = 2 a rank)
MARGIN = MarginConfig(m_min=-2.0, m_max=2.0, c_tilde=4.0, tau=0.5, static=1.0)
C = torch.tensor([3.9, 4.1, 2.0, 4.6])  # keyword concreteness c_i (1-5): margins from -1.99 to +1.9
VALID = torch.tensor([True, False, True, True])  # pair 1 (rank 0) has its hard negative masked
CASES = [(loss, mode) for loss in ("infonce", "cement", "static_margin", "clip") for mode in ("global", "local")]
# NegCLIP uses no hard-negative image: its global batch has the N anchor images only (text-only ConcreteBatch)
CASES.append(("negclip", "global"))
ANCHOR_IMAGES_ONLY = {"negclip"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ToyClip(torch.nn.Module):
    """Two linear towers + a logit scale, open_clip's output dict (features L2-normalised, scale exponentiated)."""

    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.visual = torch.nn.Linear(6, 4)
        self.text = torch.nn.Linear(5, 4)
        with torch.no_grad():
            for p in (*self.visual.parameters(), *self.text.parameters()):
                p.copy_(torch.randn(p.shape, generator=g))
        self.logit_scale = torch.nn.Parameter(torch.tensor(math.log(10.0)))

    def forward(self, images, texts):
        return {"image_features": F.normalize(self.visual(images), dim=-1),
                "text_features": F.normalize(self.text(texts), dim=-1), "logit_scale": self.logit_scale.exp()}


def _global_batch(hard: bool, anchor_images_only: bool = False) -> dict:
    g = torch.Generator().manual_seed(1)
    rows = 2 * N if hard else N
    batch = {"images": torch.randn(rows, 6, generator=g), "texts": torch.randn(rows, 5, generator=g)}
    if anchor_images_only:
        batch["images"] = batch["images"][:N]
    if hard:
        batch.update(concreteness=C.clone(), valid=VALID.clone())
    return batch


def _shard(batch: dict, rank: int, hard: bool) -> dict:
    n = N // W
    rows = global_row_index(rank, n, W, hard)
    image_rows = global_row_index(rank, n, W, hard and batch["images"].shape[0] == 2 * N)
    out = {"images": batch["images"][image_rows], "texts": batch["texts"][rows]}
    if hard:
        out.update(concreteness=batch["concreteness"][rank * n:(rank + 1) * n],
                   valid=batch["valid"][rank * n:(rank + 1) * n])
    return out


def _call(loss_fn, out, batch, hard):
    """``(terms, stats as floats)`` of one process on the whole batch."""
    terms, stats = evaluate_loss(loss_fn, out["image_features"], out["text_features"], out["logit_scale"],
                                 hard_negatives=hard, concreteness=batch.get("concreteness"),
                                 hard_negative_valid=batch.get("valid"), return_stats=True)
    return terms, stats_to_floats(stats)


# --------------------------------------------------------------------------------------------- no processes
def test_global_row_index_by_hand():
    assert global_row_index(0, 2, 2, True).tolist() == [0, 1, 4, 5]
    assert global_row_index(1, 2, 2, True).tolist() == [2, 3, 6, 7]
    assert global_row_index(1, 3, 2, False).tolist() == [3, 4, 5]
    with pytest.raises(ValueError, match="rank must be in"):
        global_row_index(2, 2, 2, True)


def test_single_process_is_plain_loss_and_checks_shapes():
    img, txt = F.normalize(torch.randn(4, 3), dim=-1), F.normalize(torch.randn(4, 3), dim=-1)
    assert gather_global_batch(img, txt, DistContext(), hard_negatives=True)[0] is img
    loss_fn = build_loss("infonce")
    got = distributed_contrastive_loss(loss_fn, img, txt, 10.0, DistContext(), hard_negatives=True, mode="local")
    assert got["contrastive_loss"].item() == pytest.approx(loss_fn(img, txt, 10.0)["contrastive_loss"].item())
    with pytest.raises(ValueError, match=r"concreteness must have shape \(2,\)"):
        gather_global_batch(img, txt, DistContext(), hard_negatives=True, concreteness=torch.ones(4))
    with pytest.raises(ValueError, match="even number of local rows"):
        gather_global_batch(img[:3], txt[:3], DistContext(), hard_negatives=True)
    with pytest.raises(ValueError, match="distributed_loss must be one of"):
        distributed_contrastive_loss(loss_fn, img, txt, 10.0, DistContext(), hard_negatives=True, mode="ring")


def test_init_distributed_without_torchrun_is_single_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_distributed() == (DistContext(0, 1, 0), False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ValueError, match="RANK is required"):
        init_distributed()


def test_local_rows_loss_by_hand():
    # N = 1: anchor v = t = (1, 0); hard negatives v' = (0, 1), t' = (0.6, 0.8); scale 1, static margin 1.
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    txt = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    loss_fn = build_loss("static_margin", MARGIN)
    # row 0 only: I2T logits [1, 0.6 + 1], T2I logits [1, 0 + 1]
    expected = (math.log1p(math.exp(0.6)) + math.log(2.0)) / 2  # 0.8653175
    got = local_rows_loss(loss_fn, img[:1], txt[:1], img, txt, 1.0, torch.tensor([0]), hard_negatives=True)
    assert got.item() == pytest.approx(expected, rel=1e-6) and expected == pytest.approx(0.8653175, abs=1e-7)
    # masking pair 0 removes both hard-negative columns: I2T and T2I rows become one-column softmaxes, loss 0
    masked = local_rows_loss(loss_fn, img[:1], txt[:1], img, txt, 1.0, torch.tensor([0]), hard_negatives=True,
                             valid_all=torch.tensor([False]))
    assert masked.item() == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="use 'global'"):
        local_rows_loss(NegCLIPLoss(), img[:1], txt[:1], img, txt, 1.0, torch.tensor([0]), hard_negatives=True)

    class OwnMaths(type(loss_fn)):  # a variant with its own loss maths is not what local_rows_loss re-implements
        def _contrastive(self, *args, **kwargs):
            return super()._contrastive(*args, **kwargs)

    with pytest.raises(ValueError, match="use 'global'"):
        local_rows_loss(OwnMaths(MARGIN), img[:1], txt[:1], img, txt, 1.0, torch.tensor([0]), hard_negatives=True)


@pytest.mark.parametrize("name", ["infonce", "cement", "static_margin", "inverse_margin", "clip"])
def test_local_rows_average_to_the_global_loss_and_gradients(name):
    """mean_r L_r over the two ranks' row sets = L, and so are the gradients (features and logit scale)."""
    hard = name != "clip"
    rows = 2 * N if hard else N
    g = torch.Generator().manual_seed(3)
    img = F.normalize(torch.randn(rows, 5, generator=g), dim=-1).requires_grad_()
    txt = F.normalize(torch.randn(rows, 5, generator=g), dim=-1).requires_grad_()
    raw_scale = torch.tensor(math.log(12.0), requires_grad=True)
    loss_fn = build_loss(name, MARGIN)
    kw = {"concreteness": C, "hard_negative_valid": VALID} if hard else {}
    ref = loss_fn(img, txt, raw_scale.exp(), output_dict=True, **kw)["contrastive_loss"]
    ref_grads = torch.autograd.grad(ref, (img, txt, raw_scale))
    parts = []
    for r in range(W):
        idx = global_row_index(r, N // W, W, hard)
        parts.append(local_rows_loss(loss_fn, img[idx], txt[idx], img, txt, raw_scale.exp(), idx,
                                     hard_negatives=hard, concreteness_all=C if hard else None,
                                     valid_all=VALID if hard else None))
    local = torch.stack(parts).mean()
    grads = torch.autograd.grad(local, (img, txt, raw_scale))
    assert local.item() == pytest.approx(ref.item(), rel=1e-6)
    assert abs(parts[0].item() - parts[1].item()) > 1e-3  # the ranks' shares differ: the mean is not trivial
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    if hard:  # the statistics' sums of the two row sets add up to the whole batch's statistics (no second forward)
        from concrete_jungle.losses import STAT_SUM_NAMES, statistics_from_sums

        sums = []
        for r in range(W):
            idx = global_row_index(r, N // W, W, hard)
            loss_r, sums_r = local_rows_loss(loss_fn, img[idx], txt[idx], img, txt, raw_scale.exp(), idx,
                                             hard_negatives=True, concreteness_all=C, valid_all=VALID,
                                             return_stat_sums=True)
            assert torch.equal(loss_r, parts[r])
            sums.append(sums_r)
        total = {k: sums[0][k] + sums[1][k] for k in STAT_SUM_NAMES}
        got_stats = stats_to_floats(statistics_from_sums(total))
        want = stats_to_floats(loss_fn(img, txt, raw_scale.exp(), return_stats=True, **kw)["stats"])
        assert got_stats == pytest.approx(want, rel=1e-6, abs=1e-7)
        assert got_stats["masked_hard_negatives"] == 1.0 and sums[0]["masked_pairs"].item() == 1.0  # pair 1: rank 0


# ------------------------------------------------------------------------------------------------ 2 processes
def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(W),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from torch.distributed.nn.functional import all_gather
    from torch.nn.parallel import DistributedDataParallel as DDP

    from concrete_jungle.training import train_step

    ctx, created = init_distributed("cpu")
    assert created and ctx == DistContext(rank, W, rank)
    results = {}
    for name, mode in CASES:
        hard = name != "clip"
        loss_fn = build_loss(name, MARGIN)
        local = _shard(_global_batch(hard, name in ANCHOR_IMAGES_ONLY), rank, hard)
        model = DDP(ToyClip())
        out = model(local["images"], local["texts"])
        out["image_features"].retain_grad()
        out["text_features"].retain_grad()
        got = distributed_contrastive_loss(
            loss_fn, out["image_features"], out["text_features"], out["logit_scale"], ctx, hard_negatives=hard,
            mode=mode, concreteness=local.get("concreteness"), hard_negative_valid=local.get("valid"),
            return_stats=True)
        total = sum(got["losses"].values())
        total.backward()
        res = {"loss": all_reduce_mean(total.detach(), ctx),
               "param_grads": {k: p.grad.clone() for k, p in model.module.named_parameters()},
               "img_grad": out["image_features"].grad.clone(), "txt_grad": out["text_features"].grad.clone(),
               "stats": stats_to_floats(got["stats"])}
        # one whole optimisation step through the trainer's train_step (clipping engaged)
        model = DDP(ToyClip())
        opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
        step = train_step(model, local, loss_fn, opt, lr=0.05, step=0, hard_negatives=hard, grad_clip=0.5, ctx=ctx,
                          distributed_loss=mode, return_stats=True)
        res["step_loss"], res["step_grad_norm"] = step["loss"], step["grad_norm"]
        res["step_stats"] = stats_to_floats(step["stats"])
        res["params_after_step"] = {k: p.detach().clone() for k, p in model.module.named_parameters()}
        results[(name, mode)] = res
    # negative control: gathering without the rearrangement ([a_0; h_0; a_1; h_1]) breaks the pairing
    local = _shard(_global_batch(True), rank, True)
    out = ToyClip()(local["images"], local["texts"])
    naive_img = torch.cat(all_gather(out["image_features"].contiguous()))
    naive_txt = torch.cat(all_gather(out["text_features"].contiguous()))
    loss_fn = build_loss("cement", MARGIN)
    results["naive"] = loss_fn(naive_img, naive_txt, out["logit_scale"], concreteness=C, hard_negative_valid=VALID,
                               output_dict=True)["contrastive_loss"].detach()
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_process_results(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("ddp")
    torch.multiprocessing.start_processes(_worker, args=(_free_port(), str(out_dir)), nprocs=W, join=True,
                                          start_method="spawn")
    return [torch.load(out_dir / f"rank{r}.pt", weights_only=True) for r in range(W)]


def _reference(name: str):
    hard = name != "clip"
    batch = _global_batch(hard, name in ANCHOR_IMAGES_ONLY)
    loss_fn = build_loss(name, MARGIN)
    model = ToyClip()
    out = model(batch["images"], batch["texts"])
    out["image_features"].retain_grad()
    out["text_features"].retain_grad()
    terms, stats = _call(loss_fn, out, batch, hard)
    total = sum(terms.values())
    total.backward()
    ref = {"loss": total.detach(), "param_grads": {k: p.grad.clone() for k, p in model.named_parameters()},
           "img_grad": out["image_features"].grad, "txt_grad": out["text_features"].grad, "stats": stats}
    from concrete_jungle.training import train_step

    model = ToyClip()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    step = train_step(model, batch, loss_fn, opt, lr=0.05, step=0, hard_negatives=hard, grad_clip=0.5)
    ref["step_loss"], ref["step_grad_norm"] = step["loss"], step["grad_norm"]
    ref["params_after_step"] = {k: p.detach().clone() for k, p in model.named_parameters()}
    return ref


@pytest.mark.slow
@pytest.mark.parametrize("name, mode", CASES)
def test_two_gloo_processes_equal_one_process(two_process_results, name, mode):
    hard = name != "clip"
    ref = _reference(name)
    for rank, results in enumerate(two_process_results):
        got = results[(name, mode)]
        torch.testing.assert_close(got["loss"], ref["loss"], rtol=1e-5, atol=0)
        # DDP averages parameter gradients over the ranks: exactly the one-process gradient
        for k, grad in ref["param_grads"].items():
            torch.testing.assert_close(got["param_grads"][k], grad, rtol=1e-5, atol=1e-7, msg=k)
        # rank-local feature gradients are W x the one-process rows (all_gather's backward sums, DDP divides by W);
        # rows N.. of the hard negatives ("hard-negative columns") are included
        rows = global_row_index(rank, N // W, W, hard)
        image_rows = global_row_index(rank, N // W, W, hard and name not in ANCHOR_IMAGES_ONLY)
        assert got["img_grad"].shape[0] == len(image_rows)
        torch.testing.assert_close(got["img_grad"] / W, ref["img_grad"][image_rows], rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(got["txt_grad"] / W, ref["txt_grad"][rows], rtol=1e-5, atol=1e-7)
        # every rank returns the statistics of the global batch (gradient ratio over valid pairs, logit gap, ...):
        # global mode from its global logits, local mode from the all-reduced sums of the ranks' rows
        for stats in (got["stats"], got["step_stats"]):
            assert stats.keys() == ref["stats"].keys()
            for k, v in ref["stats"].items():
                assert stats[k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
        torch.testing.assert_close(got["step_loss"], ref["step_loss"], rtol=1e-5, atol=0)
        torch.testing.assert_close(got["step_grad_norm"], ref["step_grad_norm"], rtol=1e-5, atol=0)
        assert ref["step_grad_norm"] > 0.5  # clipping was active
        for k, p in ref["params_after_step"].items():
            torch.testing.assert_close(got["params_after_step"][k], p, rtol=1e-5, atol=1e-7, msg=k)
    if hard:  # the hard-negative columns matter: a margin on the wrong entries changes the loss
        assert ref["stats"]["masked_hard_negatives"] == 1.0


@pytest.mark.slow
def test_gather_without_rearranging_breaks_the_pairs(two_process_results):
    ref = _reference("cement")["loss"]
    assert abs(two_process_results[0]["naive"].item() - ref.item()) > 1e-2


# ------------------------------------------------------------------------------------------ whole trainer, 2 ranks
def _records(folder) -> list[dict]:
    from PIL import Image

    recs = []
    for i in range(8):
        for kind, colour in (("a", (220, 30 * i, 0)), ("n", (0, 30 * i, 220))):
            im = Image.new("RGB", (64, 64), (255, 255, 255))
            im.paste(colour, (4 + 3 * i, 12, 36 + 3 * i, 44))
            im.save(os.path.join(folder, f"{kind}{i}.png"))
        recs.append({"image": os.path.join(folder, f"a{i}.png"), "caption": f"a red square number {i}",
                     "negative_image": os.path.join(folder, f"n{i}.png"),
                     "negative_caption": f"a blue square number {i}" if i != 5 else "a red square number 5",
                     "c_i": 3.5 + i / 8})
    return recs


def _train(out_dir: str, records: list[dict], mode: str) -> dict:
    from concrete_jungle.models.build import build_model
    from concrete_jungle.models.checkpoints import save_checkpoint
    from concrete_jungle.params import LoopParams, ModelSpec
    from concrete_jungle.training import ConcreteBatchDataset, train_contrastive

    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    ds = ConcreteBatchDataset(records, bundle.preprocess_val, bundle.tokenizer)
    loop = LoopParams(epochs=1, batch_size=4, lr=1e-4, warmup_frac=0.0, log_every=1, num_threads=1,
                      precision="fp32").model_copy(update={"distributed_loss": mode, "checkpoint_every": 1})
    return train_contrastive(bundle, ds, build_loss("cement", MARGIN), loop, seed=0,
                             live_dir=os.path.join(out_dir, mode, "live"),
                             checkpoint_path=os.path.join(out_dir, mode, "checkpoint.pt"), params_dump={"p": 1},
                             save_checkpoint=save_checkpoint, hard_negatives=True, device="cpu")


def _train_worker(rank: int, port: int, out_dir: str, records: list[dict]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(W),
                      LOCAL_RANK=str(rank), TQDM_DISABLE="1")
    torch.distributed.init_process_group("gloo")
    summaries = {mode: _train(out_dir, records, mode) for mode in ("global", "local")}
    torch.save(summaries, os.path.join(out_dir, f"summary{rank}.pt"))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_train_contrastive_on_two_ranks_matches_one_process(tmp_path):
    from concrete_jungle.models.checkpoints import read_checkpoint
    from concrete_jungle.training import read_training_state

    (tmp_path / "img").mkdir()
    records = _records(str(tmp_path / "img"))
    ref = _train(str(tmp_path / "one"), records, "global")
    torch.multiprocessing.start_processes(_train_worker, args=(_free_port(), str(tmp_path / "two"), records),
                                          nprocs=W, join=True, start_method="spawn")
    ref_ckpt = read_checkpoint(tmp_path / "one" / "global" / "checkpoint.pt")
    for mode in ("global", "local"):
        summaries = [torch.load(tmp_path / "two" / f"summary{r}.pt", weights_only=True)[mode] for r in range(W)]
        for s in summaries:  # every rank returns the global batch's figures
            assert s["steps"] == 2 and s["loss"] == pytest.approx(ref["loss"], rel=1e-4)
            assert s["gradient_ratio"] == pytest.approx(ref["gradient_ratio"], rel=1e-4)
            assert s["masked_hard_negatives"] == ref["masked_hard_negatives"]
        first = [(tmp_path / d / "live/plots/metrics/train/loss.tsv").read_text().splitlines()[1].split("\t")
                 for d in ("one/global", f"two/{mode}")]
        assert float(first[1][1]) == pytest.approx(float(first[0][1]), rel=1e-5)  # step 1: same weights, same batch
        ckpt = read_checkpoint(tmp_path / "two" / mode / "checkpoint.pt")
        for k, v in ref_ckpt["state_dict"].items():
            torch.testing.assert_close(ckpt["state_dict"][k], v, rtol=1e-4, atol=2e-6, msg=k)
        state = read_training_state(tmp_path / "two" / mode / "state.pt")
        assert len(state["rng"]) == W and not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
        assert state["fingerprint"]["world_size"] == W


class _KeyLoggingDecoder:
    """ConcreteBatchDecoder that also appends each decoded sample's key to ``<folder>/keys-<pid>.txt``."""

    def __init__(self, decode, folder: str) -> None:
        self.decode, self.folder = decode, folder

    def __call__(self, sample):
        with open(os.path.join(self.folder, f"keys-{os.getpid()}.txt"), "a") as fh:
            fh.write(sample["__key__"] + "\n")
        return self.decode(sample)


def _stream_train_worker(rank: int, port: int, out_dir: str) -> None:
    from concrete_jungle.models.build import build_model
    from concrete_jungle.models.checkpoints import save_checkpoint
    from concrete_jungle.params import LoopParams, ModelSpec
    from concrete_jungle.shards import ConcreteBatchDecoder, ShardStream
    from concrete_jungle.training import train_contrastive

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(W),
                      LOCAL_RANK=str(rank), TQDM_DISABLE="1")
    torch.distributed.init_process_group("gloo")
    bundle = build_model(ModelSpec(kind="world", name="cj-world-vit", context_length=32), seed=0)
    stream = ShardStream(os.path.join(out_dir, "shards"), seed=0, shuffle_buffer=2, seed_items=True,
                         decode=_KeyLoggingDecoder(ConcreteBatchDecoder(bundle.preprocess_val, bundle.tokenizer),
                                                   os.path.join(out_dir, "keys")))
    loop = LoopParams(epochs=1, batch_size=4, lr=1e-4, warmup_frac=0.0, log_every=1, num_threads=1,
                      precision="fp32", num_workers=2)
    summary = train_contrastive(bundle, stream, build_loss("cement", MARGIN), loop, seed=0,
                                live_dir=os.path.join(out_dir, "live"),
                                checkpoint_path=os.path.join(out_dir, "model", "checkpoint.pt"), params_dump={"p": 1},
                                save_checkpoint=save_checkpoint, hard_negatives=True, device="cpu")
    torch.save({"steps": summary["steps"]}, os.path.join(out_dir, f"summary{rank}.pt"))
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_a_run_on_shards_over_two_ranks_and_two_workers_trains_on_each_sample_once(tmp_path):
    """Issue 21 item 3: the trainer streams WebDataset shards under torchrun (2 gloo ranks x 2 DataLoader workers):
    16 pairs in shards of 3, N = 4 (2 a rank): each of the 4 (rank, worker) slots holds 4 samples, 2 whole batches,
    so each rank takes 4 steps and the epoch decodes every pair exactly once."""
    from concrete_jungle.shards import write_shards

    (tmp_path / "img").mkdir()
    (tmp_path / "keys").mkdir()
    records = _records(str(tmp_path / "img")) + [
        {**r, "caption": r["caption"] + " again"} for r in _records(str(tmp_path / "img"))]
    write_shards([{**r, "anchor_id": f"k{i:02d}"} for i, r in enumerate(records)], tmp_path / "shards",
                 "concretebatch", samples_per_shard=3)
    torch.multiprocessing.start_processes(_stream_train_worker, args=(_free_port(), str(tmp_path)), nprocs=W,
                                          join=True, start_method="spawn")
    assert [torch.load(tmp_path / f"summary{r}.pt")["steps"] for r in range(W)] == [4, 4]
    keys = [k for f in sorted((tmp_path / "keys").glob("keys-*.txt")) for k in f.read_text().split()]
    assert len((list((tmp_path / "keys").glob("keys-*.txt")))) == 4  # one file per (rank, worker) process
    assert sorted(keys) == [f"k{i:02d}" for i in range(16)]
