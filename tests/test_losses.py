"""Values of InfoNCE / Cement loss (paper Sec. 2.3) against hand computations."""

import math

import pytest
import torch
import torch.nn.functional as F

from concrete_jungle.losses import (
    CementLoss,
    InfoNCELoss,
    MarginConfig,
    build_loss,
    fermi_dirac_margin,
    hard_negative_index,
)


def _normed(n2, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = F.normalize(torch.randn(n2, d, generator=g), dim=-1)
    txt = F.normalize(torch.randn(n2, d, generator=g), dim=-1)
    return img, txt


def test_margin_at_c_tilde_is_midpoint():
    cfg = MarginConfig(m_min=-2.0, m_max=2.0, c_tilde=4.0, tau=0.15)
    m = fermi_dirac_margin(torch.tensor([4.0]), cfg)
    assert m.item() == pytest.approx(0.0, abs=1e-7)
    cfg2 = MarginConfig(m_min=0.5, m_max=3.0, c_tilde=3.2, tau=0.4)
    assert fermi_dirac_margin(torch.tensor([3.2]), cfg2).item() == pytest.approx(1.75, abs=1e-6)


def test_margin_values_by_hand():
    cfg = MarginConfig()  # paper: [-2, 2], c~ = 4, tau = 0.15
    c = torch.tensor([3.7, 4.3, 5.0])
    expected = [4.0 / (1.0 + math.exp((4.0 - x) / 0.15)) - 2.0 for x in (3.7, 4.3, 5.0)]
    assert fermi_dirac_margin(c, cfg).tolist() == pytest.approx(expected, abs=1e-6)
    # 3.7 is two tau below c~: 4 / (1 + e^2) - 2
    assert expected[0] == pytest.approx(-1.5232, abs=1e-4)


@pytest.mark.parametrize("bad", [dict(m_min=3.0, m_max=2.0), dict(tau=0.0), dict(tau=-1.0)])
def test_margin_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="margin"):
        MarginConfig(**bad)


def test_cement_with_zero_margin_equals_infonce():
    img, txt = _normed(8, 16)
    c = torch.tensor([1.5, 2.0, 3.0, 4.0, 4.5, 5.0, 2.5, 3.9])[:4]
    scale = torch.tensor(20.0)
    a = InfoNCELoss()(img, txt, scale)["contrastive_loss"]
    b = CementLoss(MarginConfig(m_min=0.0, m_max=0.0))(img, txt, scale, c)["contrastive_loss"]
    assert torch.allclose(a, b, atol=1e-6)


def test_infonce_equals_plain_cross_entropy_without_margin():
    img, txt = _normed(6, 5, seed=3)
    logits = 10.0 * img @ txt.T
    labels = torch.arange(6)
    ref = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    assert InfoNCELoss()(img, txt, 10.0)["contrastive_loss"].item() == pytest.approx(ref.item(), rel=1e-6)


def test_cement_n1_hand_computation():
    # N = 1: rows [v1, v1'], [t1, t1'] with hand-picked unit vectors.
    img = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    txt = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    scale = 10.0
    cfg = MarginConfig()
    c = 4.3
    m = 4.0 / (1.0 + math.exp((4.0 - c) / 0.15)) - 2.0
    # image->text: row v1: pos 10, hard neg 6+m ; row v1': pos 8, hard neg 0+m
    # text->image: row t1: pos 10, hard neg 0+m ; row t1': pos 8, hard neg 6+m
    def ce(pos, neg):
        return math.log(1.0 + math.exp(neg - pos))

    l_v2t = (ce(10, 6 + m) + ce(8, 0 + m)) / 2
    l_t2v = (ce(10, 0 + m) + ce(8, 6 + m)) / 2
    expected = (l_v2t + l_t2v) / 2
    loss = CementLoss(cfg)(img, txt, scale, torch.tensor([c]))["contrastive_loss"]
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(0.14133, abs=1e-4)  # 0.0807, 0.0015, 0.0002, 0.4829 by hand


def test_gradient_ratio_matches_autograd():
    torch.manual_seed(0)
    img, txt = _normed(10, 8, seed=1)
    c = torch.tensor([1.2, 2.5, 3.3, 4.1, 4.9])
    loss_fn = CementLoss(MarginConfig())
    # Recompute with the logits as a leaf to read dL/ds from autograd (image->text direction only).
    logits = (15.0 * img @ txt.T).requires_grad_(True)
    m = fermi_dirac_margin(c, loss_fn.margin_cfg)
    idx = hard_negative_index(10)
    delta = torch.zeros(10, 10)
    delta[torch.arange(10), idx] = torch.cat([m, m])
    F.cross_entropy(logits + delta, torch.arange(10), reduction="sum").backward()
    g = logits.grad
    autograd_ratio = g[torch.arange(10), idx] / (-g.diagonal())
    loss_fn(img, txt, 15.0, c)
    # the logged figure is the mean over both directions; check the image->text half equals autograd
    from concrete_jungle.losses import hard_negative_gradient_ratio

    ours = hard_negative_gradient_ratio(logits.detach() + delta)
    assert torch.allclose(ours, autograd_ratio, atol=1e-6)
    gt = (15.0 * txt @ img.T).requires_grad_(True)
    F.cross_entropy(gt + delta, torch.arange(10), reduction="sum").backward()
    both = torch.cat([autograd_ratio, gt.grad[torch.arange(10), idx] / (-gt.grad.diagonal())])
    assert loss_fn.stats["gradient_ratio"] == pytest.approx(both.mean().item(), abs=1e-6)
    assert loss_fn.stats["easy_negative_share"] == pytest.approx(1 - both.mean().item(), abs=1e-6)


def test_positive_margin_raises_gradient_ratio():
    img, txt = _normed(64, 16, seed=2)
    c = torch.full((32,), 5.0)
    base = InfoNCELoss()
    cem = CementLoss(MarginConfig())
    base(img, txt, 30.0)
    cem(img, txt, 30.0, c)
    assert cem.stats["gradient_ratio"] > base.stats["gradient_ratio"]


def test_masked_hard_negative_is_never_pushed():
    img, txt = _normed(4, 6, seed=4)
    img = img.clone().requires_grad_(True)
    valid = torch.tensor([False, True])
    out = InfoNCELoss()(img, txt, 10.0, hard_negative_valid=valid)["contrastive_loss"]
    # Same as dropping entries (0, 2) and (2, 0) in both directions.
    logits = 10.0 * img @ txt.T
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[0, 2] = mask[2, 0] = True
    ref = (
        F.cross_entropy(logits.masked_fill(mask, float("-inf")), torch.arange(4))
        + F.cross_entropy(logits.T.masked_fill(mask, float("-inf")), torch.arange(4))
    ) / 2
    assert out.item() == pytest.approx(ref.item(), rel=1e-6)
    assert torch.isfinite(torch.tensor(InfoNCELoss().stats.get("gradient_ratio", 0.0)))


def test_errors_name_the_problem():
    img, txt = _normed(4, 6)
    with pytest.raises(ValueError, match="concreteness"):
        CementLoss(MarginConfig())(img, txt, 10.0)
    with pytest.raises(ValueError, match="even"):
        InfoNCELoss()(img[:3], txt[:3], 10.0)
    with pytest.raises(ValueError, match="unknown loss"):
        build_loss("triplet")


def test_stats_when_every_hard_negative_is_masked():
    img, txt = _normed(6, 8, seed=5)
    loss_fn = InfoNCELoss()
    out = loss_fn(img, txt, 100.0, hard_negative_valid=torch.zeros(3, dtype=torch.bool))["contrastive_loss"]
    assert torch.isfinite(out)
    assert loss_fn.stats["gradient_ratio"] == 0.0
    assert loss_fn.stats["easy_negative_share"] == 1.0
    assert loss_fn.stats["logit_gap"] == 0.0
