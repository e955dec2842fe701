"""Loss variants of the paper's training (Sec. 2.3, 3.2, 3.3) against hand computations and autograd."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from open_clip.loss import ClipLoss

from concrete_jungle.losses import (
    HARD_NEGATIVE_LOSSES,
    LOSSES,
    MARGIN_LOSSES,
    CementLoss,
    ClipFineTuneLoss,
    HardNegativeContrastiveLoss,
    InfoNCELoss,
    InverseMarginLoss,
    MarginConfig,
    NegCLIPLoss,
    StaticMarginLoss,
    build_loss,
    evaluate_loss,
    fermi_dirac_margin,
    get_logits,
    hard_negative_gradient_ratio,
    hard_negative_index,
    inverse_fermi_dirac_margin,
    statistics_from_sums,
    stats_to_floats,
)

TWO_N_LOSSES = ["infonce", "cement", "static_margin", "inverse_margin"]
HARD_LOSSES = TWO_N_LOSSES + ["negclip"]


def _normed(rows, d, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    img = F.normalize(torch.randn(rows, d, generator=g, dtype=torch.float64), dim=-1).to(dtype)
    txt = F.normalize(torch.randn(rows, d, generator=g, dtype=torch.float64), dim=-1).to(dtype)
    return img, txt


def _stats(out):
    """The statistics of a ``return_stats=True`` call as floats."""
    assert set(out) == {"losses", "stats"}
    return stats_to_floats(out["stats"])


def _ce(pos, neg):
    """Two-way cross-entropy -log(e^pos / (e^pos + e^neg)) by hand."""
    return math.log1p(math.exp(neg - pos))


# ------------------------------------------------------------------------------------------------ margins
# c~ = 4, tau = 1, [m_min, m_max] = [-2, 2]: m(c~ -+ 1) = 4 / (1 + e^{+-1}) - 2 = -+0.9242343, m(c~) = 0.
WIDE = MarginConfig(m_min=-2.0, m_max=2.0, c_tilde=4.0, tau=1.0)
# asymmetric range: c~ = 3.2, tau = 0.5, [0.5, 3]: 2.5 / (1 + e^{+-2}) + 0.5 = 0.7980073 / 2.7019927, midpoint 1.75.
SKEW = MarginConfig(m_min=0.5, m_max=3.0, c_tilde=3.2, tau=0.5)


@pytest.mark.parametrize("cfg, c, cement, inverse", [
    (WIDE, [3.0, 4.0, 5.0], [-0.9242343, 0.0, 0.9242343], [0.9242343, 0.0, -0.9242343]),
    (SKEW, [2.2, 3.2, 4.2], [0.7980073, 1.75, 2.7019927], [2.7019927, 1.75, 0.7980073]),
    # the paper's setting (Sec. 3): 4 / (1 + e^{1 / 0.15}) - 2 = -1.9949161 one unit below c~
    (MarginConfig(), [3.0, 4.0, 5.0], [-1.9949161, 0.0, 1.9949161], [1.9949161, 0.0, -1.9949161]),
])
def test_margins_at_c_tilde_and_one_unit_either_side(cfg, c, cement, inverse):
    c = torch.tensor(c)
    assert fermi_dirac_margin(c, cfg).tolist() == pytest.approx(cement, abs=1e-6)
    assert inverse_fermi_dirac_margin(c, cfg).tolist() == pytest.approx(inverse, abs=1e-6)
    # what the losses add to the hard-negative logits (the batch mean of one pair is its margin)
    for name, expected in (("cement", cement), ("inverse_margin", inverse)):
        loss_fn = build_loss(name, cfg)
        for ci, m in zip(c, expected):
            st = _stats(loss_fn(*_normed(2, 3), 10.0, concreteness=ci.reshape(1), return_stats=True))
            assert st["margin_mean"] == pytest.approx(m, abs=1e-6)


def test_margin_follows_float64_concreteness():
    m = fermi_dirac_margin(torch.tensor([3.0], dtype=torch.float64), WIDE)
    assert m.dtype == torch.float64 and m.item() == pytest.approx(4.0 / (1.0 + math.e) - 2.0, abs=1e-15)


@pytest.mark.parametrize("bad, field", [(dict(m_min=3.0, m_max=2.0), "m_min"), (dict(tau=0.0), "tau"),
                                        (dict(tau=-1.0), "tau"), (dict(static=float("nan")), "static"),
                                        (dict(c_tilde=float("inf")), "c_tilde")])
def test_margin_config_rejects_bad_values(bad, field):
    with pytest.raises(ValueError, match=f"margin.{field}"):
        MarginConfig(**bad)


# ------------------------------------------------------------------------------------------------ N = 1 by hand
# Unit vectors: v1 = (1, 0), v1' = (0, 1), t1 = (1, 0), t1' = (0.6, 0.8); scale 10 gives the logits
# s(v1,t1) = 10, s(v1,t1') = 6, s(v1',t1) = 0, s(v1',t1') = 8. With margin m on both hard-negative entries the four
# rows are I2T v1: [10, 6+m], v1': [0+m, 8]; T2I t1: [10, 0+m], t1': [6+m, 8]; the loss is their mean.
N1_IMG = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
N1_TXT = torch.tensor([[1.0, 0.0], [0.6, 0.8]])


def _n1_expected(m):
    return (_ce(10, 6 + m) + _ce(8, 0 + m) + _ce(10, 0 + m) + _ce(8, 6 + m)) / 4


def test_static_margin_one_and_infonce_by_hand_n1():
    infonce = InfoNCELoss()(N1_IMG, N1_TXT, 10.0)["contrastive_loss"].item()
    static = StaticMarginLoss(MarginConfig(static=1.0))(N1_IMG, N1_TXT, 10.0)["contrastive_loss"].item()
    # log(1+e^-4), log(1+e^-8), log(1+e^-10), log(1+e^-2) = 0.0181499, 0.0003354, 0.0000454, 0.1269280
    assert infonce == pytest.approx(0.0363647, abs=1e-6)
    # log(1+e^-3), log(1+e^-7), log(1+e^-9), log(1+e^-1) = 0.0485874, 0.0009115, 0.0001234, 0.3132617
    assert static == pytest.approx(0.0907210, abs=1e-6)
    assert static == pytest.approx(_n1_expected(1.0), rel=1e-6)
    assert build_loss("static_margin").margin_cfg.static == 1.0  # the paper's static margin is the default


@pytest.mark.parametrize("name, c, m", [
    ("cement", 3.0, -0.9242343), ("cement", 4.0, 0.0), ("cement", 5.0, 0.9242343),
    ("inverse_margin", 3.0, 0.9242343), ("inverse_margin", 4.0, 0.0), ("inverse_margin", 5.0, -0.9242343),
])
def test_adaptive_margins_by_hand_n1(name, c, m):
    loss = build_loss(name, WIDE)(N1_IMG, N1_TXT, 10.0, concreteness=torch.tensor([c]))["contrastive_loss"]
    assert loss.item() == pytest.approx(_n1_expected(m), rel=1e-5)
    # cement at c~ + 1: 0.0027632 + 0.0008313 + 0.0001123 + 0.3327160 (hand) / 4
    if name == "cement" and c == 5.0:
        assert loss.item() == pytest.approx(0.0848808, abs=1e-6)


def test_negclip_and_stats_by_hand_n1():
    """The shared path in both layouts on the N = 1 batch: NegCLIP keeps I2T row v1 [10, 6] and T2I row t1 [10]
    (anchor image only: a one-column softmax, loss 0); the 2N layout logs the gap before the margin."""
    neg = NegCLIPLoss()
    out = neg(N1_IMG, N1_TXT, 10.0, return_stats=True)
    loss = out["losses"]["contrastive_loss"].item()
    assert loss == pytest.approx(_ce(10, 6) / 2, rel=1e-5) and loss == pytest.approx(0.0090750, abs=1e-7)  # float32
    assert loss == neg(N1_IMG, N1_TXT, 10.0)["contrastive_loss"].item()  # the same number without statistics
    # one negative per row (the hard one): all of the push goes to it
    assert _stats(out) == pytest.approx({"gradient_ratio": 1.0, "easy_negative_share": 0.0, "margin_mean": 0.0,
                                         "logit_gap": 4.0, "masked_hard_negatives": 0.0}, abs=1e-6)
    static = StaticMarginLoss(MarginConfig(static=1.0))
    # I2T gaps before the margin: v1 10 - 6, v1' 8 - 0
    assert _stats(static(N1_IMG, N1_TXT, 10.0, return_stats=True)) == pytest.approx(
        {"gradient_ratio": 1.0, "easy_negative_share": 0.0, "margin_mean": 1.0, "logit_gap": 6.0,
         "masked_hard_negatives": 0.0}, abs=1e-6)
    masked = neg(N1_IMG, N1_TXT, 10.0, hard_negative_valid=torch.tensor([False]), return_stats=True)
    st = _stats(masked)
    assert masked["losses"]["contrastive_loss"].item() == 0.0
    assert st["gradient_ratio"] == 0.0 and st["masked_hard_negatives"] == 1.0


def test_one_forward_path_for_every_loss():
    """Every loss of the registry has the same forward; the hard-negative variants differ only in margin / layout."""
    forwards = {cls.forward for cls in LOSSES.values()}
    assert len(forwards) == 1
    for name in HARD_LOSSES:
        cls = LOSSES[name]
        assert cls._contrastive is HardNegativeContrastiveLoss._contrastive
        assert cls._loss is HardNegativeContrastiveLoss._loss


# ------------------------------------------------------------------------------------------------ m = 0
@pytest.mark.parametrize("name, cfg", [
    ("cement", MarginConfig(m_min=0.0, m_max=0.0)),
    ("inverse_margin", MarginConfig(m_min=0.0, m_max=0.0)),
    ("static_margin", MarginConfig(static=0.0)),
])
def test_zero_margin_equals_infonce(name, cfg):
    img, txt = _normed(16, 12, seed=7)
    c = torch.tensor([1.0, 1.5, 2.0, 2.5, 3.0, 3.9, 4.0, 5.0])
    valid = torch.tensor([True, True, False, True, True, True, True, True])
    grads = []
    for fn in (InfoNCELoss(), build_loss(name, cfg)):
        i, t = img.clone().requires_grad_(True), txt.clone().requires_grad_(True)
        res = fn(i, t, 30.0, concreteness=c, hard_negative_valid=valid, return_stats=True)
        out = res["losses"]["contrastive_loss"]
        out.backward()
        grads.append((out.detach(), i.grad, t.grad, _stats(res)["gradient_ratio"]))
    (a, ai, at, ar), (b, bi, bt, br) = grads
    assert torch.allclose(a, b, atol=1e-6) and torch.allclose(ai, bi, atol=1e-6) and torch.allclose(at, bt, atol=1e-6)
    assert ar == pytest.approx(br, abs=1e-6)


# ------------------------------------------------------------------------------------------------ layouts
def test_infonce_equals_cross_entropy_over_2n_by_2n():
    img, txt = _normed(6, 5, seed=3)
    logits = 10.0 * img @ txt.T
    labels = torch.arange(6)
    ref = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    assert InfoNCELoss()(img, txt, 10.0)["contrastive_loss"].item() == pytest.approx(ref.item(), rel=1e-6)
    assert InfoNCELoss()(img, txt, torch.tensor(10.0), output_dict=False).item() == pytest.approx(ref.item(), rel=1e-6)


def test_margin_goes_on_both_hard_negative_entries_of_each_pair_only():
    img, txt = _normed(6, 5, seed=4)
    c = torch.tensor([2.0, 4.5, 5.0])
    m = fermi_dirac_margin(c, MarginConfig())
    logits = 10.0 * img @ txt.T
    delta = torch.zeros(6, 6)
    for i in range(3):  # s(v_i, t'_i) and s(v'_i, t_i)
        delta[i, i + 3] = delta[i + 3, i] = m[i]
    labels = torch.arange(6)
    ref = (F.cross_entropy(logits + delta, labels) + F.cross_entropy((logits + delta).T, labels)) / 2
    out = CementLoss(MarginConfig())(img, txt, 10.0, concreteness=c)["contrastive_loss"]
    assert out.item() == pytest.approx(ref.item(), rel=1e-6)
    assert hard_negative_index(6).tolist() == [3, 4, 5, 0, 1, 2]


def test_negclip_layout_and_unused_negative_images():
    n = 4
    img, txt = _normed(2 * n, 6, seed=5)
    labels = torch.arange(n)
    li = 20.0 * img[:n] @ txt.T  # [N, 2N]: anchor images against [T; T']
    lt = 20.0 * txt[:n] @ img[:n].T  # [N, N]: anchor captions against anchor images
    ref = (F.cross_entropy(li, labels) + F.cross_entropy(lt, labels)) / 2
    i2 = img.clone().requires_grad_(True)
    full = NegCLIPLoss()(i2, txt, 20.0)["contrastive_loss"]
    full.backward()
    short = NegCLIPLoss()(img[:n], txt, 20.0)["contrastive_loss"]
    assert full.item() == pytest.approx(ref.item(), rel=1e-6)
    assert short.item() == pytest.approx(ref.item(), rel=1e-6)
    assert torch.count_nonzero(i2.grad[n:]) == 0 and torch.count_nonzero(i2.grad[:n]) > 0
    assert NegCLIPLoss.needs_hard_negative_images is False


def test_clip_is_open_clip_cliploss_over_anchors():
    img, txt = _normed(5, 7, seed=6)
    ours = ClipFineTuneLoss()
    out = ours(img, txt, 15.0)["contrastive_loss"]
    ref = ClipLoss()(img, txt, 15.0)
    labels = torch.arange(5)
    by_hand = (F.cross_entropy(15.0 * img @ txt.T, labels) + F.cross_entropy(15.0 * txt @ img.T, labels)) / 2
    assert out.item() == pytest.approx(ref.item(), rel=1e-6) and out.item() == pytest.approx(by_hand.item(), rel=1e-6)
    with_stats = ours(img, txt, 15.0, return_stats=True)
    assert torch.equal(with_stats["losses"]["contrastive_loss"], out)
    assert _stats(with_stats) == {"gradient_ratio": 0.0, "easy_negative_share": 1.0, "margin_mean": 0.0,
                                  "masked_hard_negatives": 0.0}
    # the uniform call works; a 2N ConcreteBatch passed with its N c_i is caught
    ours(img, txt, 15.0, concreteness=torch.full((5,), 3.0), hard_negative_valid=torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"clip \(anchors only"):
        ours(*_normed(10, 7), 15.0, concreteness=torch.full((5,), 3.0))


def test_registry_attributes_and_uniform_constructor():
    assert set(LOSSES) == {"clip", "infonce", "cement", "static_margin", "inverse_margin", "negclip"}
    assert MARGIN_LOSSES == {"cement", "static_margin", "inverse_margin"}
    assert HARD_NEGATIVE_LOSSES == {"infonce", "cement", "static_margin", "inverse_margin", "negclip"}
    cfg = MarginConfig(m_min=-1.0, m_max=1.5, static=0.25)
    for name, cls in LOSSES.items():
        fn = build_loss(name, cfg)
        assert type(fn) is cls and fn.name == name and fn.margin_cfg is cfg
        assert isinstance(fn, HardNegativeContrastiveLoss) == (name != "clip")
    assert CementLoss.margin_fields == InverseMarginLoss.margin_fields == ("m_min", "m_max", "c_tilde", "tau")
    assert StaticMarginLoss.margin_fields == ("static",) and InfoNCELoss.margin_fields == ()
    assert LOSSES["clip"].needs_hard_negatives is False and LOSSES["cement"].needs_hard_negative_images is True
    assert build_loss("cement").margin_cfg == MarginConfig()


@pytest.mark.parametrize("name", HARD_LOSSES)
def test_forward_equals_reference_from_separate_logits(name):
    """The fast path (one product, in-place margin, transposed T2I) gives the reference loss, gradients and stats."""
    n = 6
    img, txt = _normed(2 * n, 8, seed=8, dtype=torch.float64)
    c = torch.tensor([1.2, 2.5, 3.3, 4.1, 4.9, 4.0], dtype=torch.float64)
    valid = torch.tensor([True, False, True, True, True, True])
    fn = build_loss(name, MarginConfig(m_min=-1.0, m_max=3.0, c_tilde=3.5, tau=0.5, static=1.5))
    i1, t1 = img.clone().requires_grad_(True), txt.clone().requires_grad_(True)
    res = fn(i1, t1, 25.0, concreteness=c, hard_negative_valid=valid, return_stats=True)
    fast = res["losses"]["contrastive_loss"]
    fast.backward()
    fast_stats = _stats(res)
    i2, t2 = img.clone().requires_grad_(True), txt.clone().requires_grad_(True)
    if name == "negclip":
        li, lt = 25.0 * i2[:n] @ t2.T, 25.0 * t2[:n] @ i2[:n].T
    else:
        li, lt = 25.0 * i2 @ t2.T, 25.0 * t2 @ i2.T
    ref_res = fn.loss_from_logits(li, lt, concreteness=c, hard_negative_valid=valid, return_stats=True)
    ref = ref_res["losses"]["contrastive_loss"]
    ref.backward()
    assert fast.item() == pytest.approx(ref.item(), rel=1e-12)
    assert torch.allclose(i1.grad, i2.grad, atol=1e-12) and torch.allclose(t1.grad, t2.grad, atol=1e-12)
    assert fast_stats == pytest.approx(_stats(ref_res), abs=1e-12)
    assert fast_stats["masked_hard_negatives"] == 1.0


def test_get_logits_shapes():
    img, txt = _normed(4, 3)
    li, lt = get_logits(img[:2], txt, 5.0)
    assert li.shape == (2, 4) and lt.shape == (4, 2) and torch.equal(lt, li.T)
    assert li[1, 3].item() == pytest.approx(5.0 * float(img[1] @ txt[3]), rel=1e-6)


# ------------------------------------------------------------------------------------------------ gradient ratio
@pytest.mark.parametrize("name", HARD_LOSSES)
def test_logged_gradient_ratio_equals_autograd_ratio(name):
    """stats["gradient_ratio"] = mean over valid rows of (dL/ds_{i,i'}) / (-dL/ds_{i,i}) and the easy-negative share
    = mean of (sum_{j not in {i,i'}} dL/ds_{i,j}) / (-dL/ds_{i,i}), with dL/ds from autograd on a random batch."""
    n = 8
    g = torch.Generator().manual_seed(11)
    c = 1.0 + 4.0 * torch.rand(n, generator=g, dtype=torch.float64)
    valid = torch.ones(n, dtype=torch.bool)
    valid[3] = False
    fn = build_loss(name, MarginConfig(static=1.0))
    i_shape, t_shape = ((n, 2 * n), (n, n)) if name == "negclip" else ((2 * n, 2 * n), (2 * n, 2 * n))
    li = (8.0 * torch.randn(i_shape, generator=g, dtype=torch.float64)).requires_grad_(True)
    lt = (8.0 * torch.randn(t_shape, generator=g, dtype=torch.float64)).requires_grad_(True)
    res = fn.loss_from_logits(li, lt, concreteness=c, hard_negative_valid=valid, return_stats=True)
    res["losses"]["contrastive_loss"].backward()
    st = _stats(res)
    hard, easy = [], []
    directions = [li.grad] if name == "negclip" else [li.grad, lt.grad]
    for grad in directions:
        rows = grad.shape[0]
        for r in range(rows):
            if not valid[r % n]:
                assert grad[r, (r + n) % grad.shape[1]].item() == 0.0  # masked: never pushed
                continue
            h = (r + n) % grad.shape[1]
            pull = -grad[r, r].item()
            hard.append(grad[r, h].item() / pull)
            easy.append((grad[r].sum() - grad[r, r] - grad[r, h]).item() / pull)
    assert len(hard) == (n - 1) * len(directions) * (1 if name == "negclip" else 2)
    assert st["gradient_ratio"] == pytest.approx(sum(hard) / len(hard), abs=1e-9)
    assert st["easy_negative_share"] == pytest.approx(sum(easy) / len(easy), abs=1e-9)
    assert 0.0 < st["gradient_ratio"] < 1.0


def test_gradient_ratio_keeps_precision_when_the_positive_dominates():
    # p_ii = 1 - ~1e-11: float32 1 - p_ii is 0, the ratio must still be p_{i,i'} / sum_{j != i} p_{i,j}.
    logits = torch.tensor([[30.0, 4.0, 5.0, 3.0], [0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0], [0.5, 0.0, 9.0, 2.0]])
    ours = hard_negative_gradient_ratio(logits)
    expected = [math.exp(5) / (math.exp(4) + math.exp(5) + math.exp(3)),
                math.exp(3) / (1 + math.exp(2) + math.exp(3)), 1 / 3,
                math.exp(0.0) / (math.exp(0.5) + 1 + math.exp(9))]
    assert ours.tolist() == pytest.approx(expected, rel=1e-5)
    assert ours[0].item() == pytest.approx(0.6652410, rel=1e-5)  # e^5 / (e^4 + e^5 + e^3)
    assert hard_negative_gradient_ratio(logits, valid=torch.tensor([True, False, True, True]))[1].item() == 0.0


def test_positive_margin_raises_and_inverse_margin_lowers_gradient_ratio():
    img, txt = _normed(64, 16, seed=2)
    c = torch.full((32,), 5.0)
    ratios = {}
    for name in ("infonce", "cement", "inverse_margin", "static_margin"):
        fn = build_loss(name)
        ratios[name] = _stats(fn(img, txt, 30.0, concreteness=c, return_stats=True))["gradient_ratio"]
    assert ratios["inverse_margin"] < ratios["infonce"] < ratios["static_margin"] < ratios["cement"]


# ------------------------------------------------------------------------------------------------ masking
@pytest.mark.parametrize("name", HARD_LOSSES)
def test_masked_hard_negative_gets_exactly_zero_gradient(name):
    """With one-hot text features t_k = e_k, the logit s(v_j, t_k) = scale * v_j[k], so dL/dv_j[k] is scale times the
    total gradient on that entry. A masked pair's hard-negative entries must get exactly 0 (both directions)."""
    n, masked = 4, 2
    txt = torch.eye(2 * n)
    img = F.normalize(torch.randn(2 * n, 2 * n, generator=torch.Generator().manual_seed(3)), dim=-1)
    c = torch.tensor([2.0, 3.0, 4.5, 5.0])
    entries = [(masked, masked + n)] + ([] if name == "negclip" else [(masked + n, masked)])
    for valid, expect_zero in ((torch.tensor([True, True, False, True]), True), (None, False)):
        v = img.clone().requires_grad_(True)
        fn = build_loss(name)
        res = fn(v, txt, 10.0, concreteness=c, hard_negative_valid=valid, return_stats=True)
        res["losses"]["contrastive_loss"].backward()
        for row, col in entries:
            assert (v.grad[row, col].item() == 0.0) == expect_zero, (row, col, v.grad[row, col].item())
        assert _stats(res)["masked_hard_negatives"] == (1.0 if expect_zero else 0.0)


def test_masked_pair_equals_dropping_its_hard_negative_entries():
    img, txt = _normed(4, 6, seed=4)
    valid = torch.tensor([False, True])
    out = InfoNCELoss()(img, txt, 10.0, hard_negative_valid=valid)["contrastive_loss"]
    logits = 10.0 * img @ txt.T
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[0, 2] = mask[2, 0] = True
    ref = (F.cross_entropy(logits.masked_fill(mask, float("-inf")), torch.arange(4))
           + F.cross_entropy(logits.T.masked_fill(mask, float("-inf")), torch.arange(4))) / 2
    assert out.item() == pytest.approx(ref.item(), rel=1e-6)


def test_stats_exclude_masked_pairs():
    img, txt = _normed(6, 8, seed=9)
    c = torch.tensor([5.0, 3.0, 4.0])
    fn = CementLoss(WIDE)
    st = _stats(fn(img, txt, 10.0, concreteness=c, hard_negative_valid=torch.tensor([False, True, True]),
                   return_stats=True))
    assert st["margin_mean"] == pytest.approx((-0.9242343 + 0.0) / 2, abs=1e-6)
    logits = 10.0 * img @ txt.T
    gaps = [(logits[r, r] - logits[r, (r + 3) % 6]).item() for r in (1, 2, 4, 5)]
    assert st["logit_gap"] == pytest.approx(sum(gaps) / 4, abs=1e-5)


def test_stats_when_every_hard_negative_is_masked():
    img, txt = _normed(6, 8, seed=5)
    loss_fn = InfoNCELoss()
    res = loss_fn(img, txt, 100.0, hard_negative_valid=torch.zeros(3, dtype=torch.bool), return_stats=True)
    assert torch.isfinite(res["losses"]["contrastive_loss"])
    assert _stats(res) == {"gradient_ratio": 0.0, "easy_negative_share": 1.0, "margin_mean": 0.0, "logit_gap": 0.0,
                             "masked_hard_negatives": 3.0}


def test_call_used_by_training_and_gradient_ratio_study():
    """Positional (features, scale, c_i, valid) as training.py calls it, keywords as gradient_ratio.py does, no_grad."""
    img, txt = _normed(8, 4, seed=12)
    c, valid = torch.tensor([1.5, 2.5, 3.5, 4.5]), torch.ones(4, dtype=torch.bool)
    a = CementLoss(MarginConfig())(img, txt, torch.tensor(12.0), c, valid)
    with torch.no_grad():
        static = build_loss("static_margin", dataclasses.replace(MarginConfig(), static=2.0))
        b = static(img, txt, 12.0, concreteness=c)
        st = _stats(static(img, txt, 12.0, concreteness=c, return_stats=True))
    assert set(a) == set(b) == {"contrastive_loss"} and st["margin_mean"] == 2.0


# ------------------------------------------------------------------------------------------------ errors
def test_errors_name_the_problem():
    img, txt = _normed(4, 6)
    c = torch.tensor([3.0, 4.0])
    cases = [
        (lambda: CementLoss(MarginConfig())(img, txt, 10.0), "cement loss needs the keyword concreteness"),
        (lambda: InverseMarginLoss()(img, txt, 10.0), "inverse_margin loss needs the keyword concreteness"),
        (lambda: InfoNCELoss()(img[:3], txt[:3], 10.0), "even, positive number of rows"),
        (lambda: InfoNCELoss()(img, txt[:2], 10.0), "differ"),
        (lambda: InfoNCELoss()(img, txt[:, :5], 10.0), "different embedding sizes"),
        (lambda: InfoNCELoss()(img[0], txt[0], 10.0), "image_features must be 2-D"),
        (lambda: CementLoss()(img, txt, 10.0, concreteness=torch.tensor([3.0, 4.0, 5.0])),
         r"concreteness must have shape \(2,\)"),
        (lambda: CementLoss()(img, txt, 10.0, concreteness=torch.tensor([0.5, 4.0])), r"in \[1, 5\]"),
        (lambda: CementLoss()(img, txt, 10.0, concreteness=torch.tensor([float("nan"), 4.0])), "finite"),
        (lambda: InfoNCELoss()(img, txt, 10.0, hard_negative_valid=torch.tensor([1, 0])), "must be bool"),
        (lambda: InfoNCELoss()(img, txt, 10.0, hard_negative_valid=torch.ones(4, dtype=torch.bool)),
         r"hard_negative_valid must be a bool tensor of shape \(2,\)"),
        (lambda: NegCLIPLoss()(img[:3], txt, 10.0), "N = 2 or 2N = 4 rows"),
        (lambda: NegCLIPLoss()(img, txt[:3], 10.0), "text_features must have an even"),
        (lambda: build_loss("triplet"), "unknown loss 'triplet'"),
        (lambda: build_loss("cement", {"m_min": 0}), "margin must be a MarginConfig"),
        (lambda: hard_negative_gradient_ratio(torch.zeros(2, 3)), "not square"),
        (lambda: InfoNCELoss().loss_from_logits(torch.zeros(4, 4), torch.zeros(4, 2)), r"both be \[2N, 2N\]"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    CementLoss()(img, txt, 10.0, concreteness=c)  # the same inputs with valid c_i pass


# ------------------------------------------------------------------------------------------------ stateless API
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_are_stateless_and_stats_only_when_asked(name):
    """No batch leaves anything on the module; the same call with and without ``return_stats`` gives the same loss
    bits; the statistics of one batch do not depend on an earlier call."""
    from concrete_jungle.losses import STAT_NAMES

    hard = name != "clip"
    img, txt = _normed(8 if hard else 4, 6, seed=13)
    kw = {"concreteness": torch.tensor([2.0, 3.0, 4.0, 5.0]), "hard_negative_valid": torch.tensor(
        [True, False, True, True])} if hard else {}
    fn = build_loss(name, MarginConfig())
    before = set(vars(fn))
    plain = fn(img, txt, 20.0, **kw)
    first = fn(img, txt, 20.0, return_stats=True, **kw)
    other = fn(*_normed(8 if hard else 4, 6, seed=14), 20.0, return_stats=True, **kw)
    again = fn(img, txt, 20.0, return_stats=True, **kw)
    assert set(vars(fn)) == before and not hasattr(fn, "stats")
    assert set(plain) == {"contrastive_loss"} and set(first) == {"losses", "stats"}
    assert torch.equal(plain["contrastive_loss"], first["losses"]["contrastive_loss"])
    assert _stats(first) == _stats(again) != _stats(other) or not hard
    assert set(first["stats"]) == (set(STAT_NAMES) if hard else set(STAT_NAMES) - {"logit_gap"})
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 and not v.requires_grad for v in first["stats"].values())
    with pytest.raises(ValueError, match="return_stats=True returns a dict"):
        fn(img, txt, 20.0, output_dict=False, return_stats=True, **kw)


def test_evaluate_loss_takes_open_clip_cliploss_and_plain_callables():
    img, txt = _normed(4, 5, seed=15)
    terms, stats = evaluate_loss(ClipLoss(), img, txt, 10.0, hard_negatives=False, return_stats=True)
    assert stats is None and terms["contrastive_loss"].item() == pytest.approx(
        ClipFineTuneLoss()(img, txt, 10.0)["contrastive_loss"].item(), rel=1e-7)
    terms, stats = evaluate_loss(InfoNCELoss(), img, txt, 10.0, hard_negatives=True, return_stats=True)
    # 2N = 4: InfoNCE's statistics with no mask: masked 0, margin 0
    assert stats_to_floats(stats)["masked_hard_negatives"] == 0.0 and stats_to_floats(stats)["margin_mean"] == 0.0
    seen = {}

    def custom(i, t, s, **kw):
        seen.update(kw)
        return {"contrastive_loss": (i * t).sum()}

    terms, stats = evaluate_loss(custom, img, txt, 10.0, hard_negatives=True, concreteness=None,
                                 hard_negative_valid=None, return_stats=True)
    assert stats is None and set(seen) == {"concreteness", "hard_negative_valid", "output_dict"}


def test_statistics_from_sums_by_hand():
    """ratio 1.5 / 3 rows = 0.5, gap 6 / 2 = 3, margin 1 / 2 = 0.5, 1 pair masked; empty counts give 0."""
    t = torch.tensor
    s = statistics_from_sums({"ratio_sum": t(1.5), "ratio_rows": t(3.0), "gap_sum": t(6.0), "gap_rows": t(2.0),
                              "margin_sum": t(1.0), "margin_pairs": t(2.0), "masked_pairs": t(1.0)})
    assert stats_to_floats(s) == {"gradient_ratio": 0.5, "easy_negative_share": 0.5, "margin_mean": 0.5,
                                  "logit_gap": 3.0, "masked_hard_negatives": 1.0}
    empty = statistics_from_sums({k: t(0.0) for k in ("ratio_sum", "ratio_rows", "gap_sum", "gap_rows",
                                                      "margin_sum", "margin_pairs", "masked_pairs")})
    assert stats_to_floats(empty) == {"gradient_ratio": 0.0, "easy_negative_share": 1.0, "margin_mean": 0.0,
                                      "logit_gap": 0.0, "masked_hard_negatives": 0.0}


def test_gradient_ratio_study_reads_the_returned_statistics():
    from concrete_jungle.gradient_ratio import gradient_ratio_study, study_losses

    g = torch.Generator().manual_seed(16)
    emb = [F.normalize(torch.randn(6, 8, generator=g), dim=-1) for _ in range(4)]
    c = torch.tensor([1.5, 2.5, 3.5, 4.0, 4.5, 5.0])
    losses = study_losses(MarginConfig(), [1.0])
    res = gradient_ratio_study(*emb, c, 20.0, [4, 10], losses, n_batches=1, seed=0)
    assert res["skipped"] == {"10": "only 6 pairs available"} and len(res["rows"]) == 3
    idx = torch.from_numpy(__import__("numpy").random.default_rng(0).choice(6, size=4, replace=False))
    direct = stats_to_floats(losses["infonce"](torch.cat([emb[0][idx], emb[2][idx]]),
                                               torch.cat([emb[1][idx], emb[3][idx]]), 20.0, concreteness=c[idx],
                                               return_stats=True)["stats"])
    row = next(r for r in res["rows"] if r["loss"] == "infonce")
    assert row["gradient_ratio"] == direct["gradient_ratio"] and row["logit_gap"] == direct["logit_gap"]
