"""The positive control (concrete_jungle.evaluation.positive_control) and the MDE (paired.mcnemar_mde): hand-computed
gains, exact McNemar p-values, Connor's MDE, verdicts and the report section."""

import json
import math

import pytest
from scipy.stats import norm

from analysis.tables import positive_control_markdown
from concrete_jungle.evaluation.paired import mcnemar_mde, mde_from_ci
from concrete_jungle.evaluation.positive_control import (control_stats, failed_models, positive_control,
                                                         read_heldout_verdicts, summary_line)


def test_mcnemar_mde_solves_connors_equation():
    # n = 875 items (real SugarCrepe with images), 20 % discordant, alpha 0.05, power 0.8
    d = mcnemar_mde(875, 0.2)
    z_a, z_b = norm.ppf(0.975), norm.ppf(0.8)
    assert math.sqrt(875) * d == pytest.approx(z_a * math.sqrt(0.2) + z_b * math.sqrt(0.2 - d * d), abs=1e-8)
    assert d == pytest.approx(0.0423, abs=5e-4)  # about (1.96 + 0.84) * sqrt(0.2 / 875) = 4.2 points
    assert mcnemar_mde(4 * 875, 0.2) == pytest.approx(d / 2, rel=0.02)  # 1 / sqrt(n)
    assert mcnemar_mde(875, 0.2, alpha=0.001) > d  # a stricter level needs a larger effect
    # no discordant item: psi is taken as delta itself (|delta| <= psi), still finite and positive
    z = mcnemar_mde(310, 0.0)
    assert math.sqrt(310) * z == pytest.approx(z_a * math.sqrt(z) + z_b * math.sqrt(z - z * z), abs=1e-8)
    assert mcnemar_mde(3, 0.5) == 1.0  # sqrt(3) < 1.96: no effect up to 100 points is detectable
    for bad in ({"n": 0, "discordance": 0.1}, {"n": 10, "discordance": 1.5}, {"n": 10, "discordance": 0.1,
                                                                              "alpha": 0}):
        with pytest.raises(ValueError, match="mcnemar_mde"):
            mcnemar_mde(**bad)


def _items(n_attr=10, n_rel=10, images=False):
    extra = lambda i: {"negative_image": f"n{i}.png"} if images else {}  # noqa: E731
    return {"hc": [{"anchor_id": f"a{i}", "type": "attribute", **extra(i)} for i in range(n_attr)]
            + [{"anchor_id": f"r{i}", "type": "relation", **extra(i)} for i in range(n_rel)]}


def _ids(items):
    return [p["anchor_id"] for p in items["hc"]]


def test_control_stats_gain_p_and_verdict():
    ids = [str(i) for i in range(20)]
    model = {i: True for i in ids}
    ref = {i: int(i) < 5 for i in ids}  # 15 pairs only the model gets right, none only the reference
    st = control_stats(model, ref, min_gain=10, alpha=0.001, power=0.8, n_resamples=200, confidence_level=0.95,
                       seed=0)
    assert st["n"] == 20 and st["accuracy_pct"] == 100.0 and st["reference_accuracy_pct"] == 25.0
    assert st["gain_points"] == pytest.approx(75.0) and (st["only_model"], st["only_reference"]) == (15, 0)
    assert st["mcnemar_p"] == pytest.approx(2 * 0.5 ** 15)  # exact two-sided binomial on 15 discordant pairs
    assert st["passed"] and st["ci_points"][0] <= 75.0 <= st["ci_points"][1]
    assert st["mde_points"] == pytest.approx(100 * mcnemar_mde(20, 0.75, alpha=0.001))
    # +10 points on 2 discordant pairs: p = 0.5, fails whatever the gain
    two = {i: int(i) < 12 for i in ids}
    st2 = control_stats(two, {i: int(i) < 10 for i in ids}, min_gain=10, alpha=0.001, power=0.8, n_resamples=200,
                        confidence_level=0.95, seed=0)
    assert st2["gain_points"] == pytest.approx(10.0) and st2["mcnemar_p"] == pytest.approx(0.5)
    assert not st2["passed"]


def test_positive_control_verdicts_per_model_and_study():
    items = _items(images=True)  # negative images: the criterion needs I2T and T2I
    ids = _ids(items)
    strong = {i: True for i in ids}
    clip = {i: i in ("a0", "a1", "r0", "r1", "r2") for i in ids}  # 5 of 20 right
    weak_t2i = {i: clip[i] or i in ("a2", "a3") for i in ids}  # +10 points on 2 pairs
    verdicts = {"hc-infonce": {"i2t": {"hc": strong}, "t2i": {"hc": strong}},
                "hc-cement": {"i2t": {"hc": strong}, "t2i": {"hc": weak_t2i}},
                "clip": {"i2t": {"hc": clip}, "t2i": {"hc": clip}}}
    out = positive_control(items, verdicts, ["hc-infonce", "hc-cement"], ["clip"], n_resamples=200)
    # the control arm (infonce) passes; the treatment (cement) does not beat clip in T2I: a result, not a failure
    assert out["status"] == "passed" and out["passed"] is True and out["failed"] == []
    assert out["control_arms"] == ["hc-infonce"] and out["criterion"]["control_losses"] == ["infonce"]
    good, bad = out["models"]["hc-infonce"], out["models"]["hc-cement"]
    assert (good["role"], bad["role"]) == ("control", "treatment")
    assert good["passed"] and good["dataset"] == "hc" and bad["passed"] is False
    assert good["vs"]["clip"]["i2t"]["gain_points"] == pytest.approx(75.0)
    # clip leaves 75 points of errors: half of them is 37.5 > 10, so 10 points are required
    assert good["vs"]["clip"]["i2t"]["required_gain_points"] == pytest.approx(10.0)
    rel = good["vs"]["clip"]["by_type"]["relation"]["i2t"]
    assert rel["n"] == 10 and rel["gain_points"] == pytest.approx(70.0)  # clip right on 3 of 10 relations
    assert rel["mcnemar_p"] == pytest.approx(2 * 0.5 ** 7) and not rel["passed"]  # 7 discordant: p = 0.0156
    assert bad["vs"]["clip"]["i2t"]["passed"] and not bad["vs"]["clip"]["t2i"]["passed"]
    assert failed_models(out) == {}  # the treatment's dataset has a passing control arm: every row can be read
    json.dumps(out, allow_nan=False)  # finite, serialisable
    # the arm weak, the treatment strong: 20 pairs cannot show 10 points at p < 0.001 (MDE > 10), so the arm's
    # miss is underpowered, not failed, and both models on hc cannot be read
    swapped = {**verdicts, "hc-infonce": verdicts["hc-cement"], "hc-cement": verdicts["hc-infonce"]}
    fail = positive_control(items, swapped, ["hc-infonce", "hc-cement"], ["clip"], n_resamples=200)
    t2i = fail["models"]["hc-infonce"]["vs"]["clip"]["t2i"]
    assert t2i["mde_points"] == pytest.approx(100 * mcnemar_mde(20, 2 / 20, alpha=0.001)) and t2i["mde_points"] > 10
    assert fail["status"] == "underpowered" and fail["failed"] == [] and fail["underpowered"] == ["hc-infonce"]
    ci = lambda st: f"[{st['ci_points'][0]:+.1f}, {st['ci_points'][1]:+.1f}]"  # noqa: E731
    i2t = fail["models"]["hc-infonce"]["vs"]["clip"]["i2t"]
    assert t2i["ci_points"][1] >= 10  # +10 points on 2 discordant pairs: the CI still holds the required 10
    assert fail["reason"] == ("no control arm could be decided: hc-infonce is underpowered vs clip: gain +75.0 / "
                              f"+10.0 points, CI {ci(i2t)} / {ci(t2i)} holds the required 10.0 / 10.0")
    assert failed_models(fail) == {"hc-infonce": "the positive control was underpowered",
                                   "hc-cement": "its dataset's control arm hc-infonce underpowered"}
    md = positive_control_markdown(fail)
    assert md.startswith("## Positive control\n\n**UNDERPOWERED**: the control arm of each ConcreteBatch (its "
                         "infonce fine-tune) beats every baseline")
    head = "| **hc-cement** | treatment | clip | hc all | I2T |"
    row = next(line for line in md.splitlines() if line.startswith(head))
    assert "| 20 | 100.0 | 25.0 | +75.0 |" in row and "| 10.0 |" in row and row.endswith("| ✓ |")
    assert "| hc-infonce | control | | | | | | | | | | | | **UNDERPOWERED** |" in md
    assert "| hc-cement | treatment | | | | | | | | | | | | **beats the reference** |" in md
    assert "**PASSED**" in positive_control_markdown(out)
    line = summary_line(fail)
    assert line.startswith("**UNDERPOWERED** (control arms: the infonce fine-tune of each ConcreteBatch; gain over "
                           "clip on the model's own held-out pairs, I2T / T2I in points, needs >= 10, or 0.5 of its "
                           "errors where that is less, with McNemar p < 0.001): hc-infonce +75.0 / +10.0 (needs 10.0 "
                           "/ 10.0, MDE ")
    assert ". Treatments, gain over clip: hc-cement +75.0 / +75.0. no control arm could be decided: " in line
    assert line.endswith("marked ✗ cannot be read, nor those of the treatments on their datasets")
    assert summary_line(out).startswith("**PASSED**") and "✗" not in summary_line(out)
    # a file written before control arms and verdicts (no role, no verdict; a pending re-run's results) keeps its
    # own reading: each model its own arm, judged by `passed`
    def strip(d):
        return {k: strip(v) for k, v in d.items() if k not in ("role", "verdict")} if isinstance(d, dict) else d

    old = {**{k: v for k, v in strip(fail).items() if k != "underpowered"}, "status": "failed",
           "reason": "1 of 1 models did not pass",
           "criterion": {k: v for k, v in fail["criterion"].items() if k not in ("control_losses", "headroom_share")}}
    assert failed_models(old) == {"hc-infonce": "the positive control failed"}
    assert summary_line(old).startswith("**FAILED** (gain over clip on the model's own held-out pairs, I2T / T2I in "
                                        "points, needs >= 10 with McNemar p < 0.001): hc-infonce +75.0 / +10.0 (MDE ")
    assert "hc-cement +75.0 / +75.0 (MDE " in summary_line(old) and "✗ underpowered" not in summary_line(old)


def test_positive_control_headroom_and_no_control_arm():
    # clip right on 360 of 400 pairs (10 points of errors): half of them, 5 points, is required instead of 10
    items = {"hc": [{"anchor_id": f"a{i}", "type": "attribute"} for i in range(400)]}
    ids = _ids(items)
    clip = {i: k < 360 for k, i in enumerate(ids)}
    fixes20 = {i: k < 380 for k, i in enumerate(ids)}  # +20 pairs, none lost: +5.0 points, p = 2 * 0.5 ** 20
    fixes19 = {i: k < 379 for k, i in enumerate(ids)}  # +4.75 points
    def run(m, **kw):
        return positive_control(items, {"hc-infonce": {"i2t": {"hc": m}}, "clip": {"i2t": {"hc": clip}}},
                                ["hc-infonce"], ["clip"], n_resamples=50, **kw)

    st = run(fixes20)["models"]["hc-infonce"]["vs"]["clip"]["i2t"]
    assert st["required_gain_points"] == pytest.approx(5.0) and st["gain_points"] == pytest.approx(5.0)
    assert st["mcnemar_p"] == pytest.approx(2 * 0.5 ** 20) and st["passed"]
    # 4.75 points (p 2e-6) misses 5 but its CI holds 5: underpowered, not failed
    assert run(fixes20)["status"] == "passed" and run(fixes19)["status"] == "underpowered"
    strict = run(fixes20, headroom_share=None)  # min_gain always: a ceiling leaves no pass
    assert strict["models"]["hc-infonce"]["vs"]["clip"]["i2t"]["required_gain_points"] == pytest.approx(10.0)
    assert strict["status"] == "failed"
    # a grid without the control arm's loss cannot be judged; its models cannot be read
    none = positive_control(items, {"hc-cement": {"i2t": {"hc": fixes20}}, "clip": {"i2t": {"hc": clip}}},
                            ["hc-cement"], ["clip"], n_resamples=50)
    assert none["status"] == "unavailable" and none["control_arms"] == []
    assert none["reason"] == "no control arm: no fine-tune with a loss of ['infonce'] in the grid"
    assert failed_models(none) == {"hc-cement": "no control arm on hc"}


def test_positive_control_unavailable_and_bad_input(tmp_path):
    items = _items(3, 0)
    clip = {"i2t": {"hc": {i: False for i in _ids(items)}}}
    out = positive_control(items, {"hc-infonce": None, "clip": clip}, ["hc-infonce"], ["clip"])
    assert out["status"] == "unavailable" and out["passed"] is False
    assert "no held-out verdicts for hc-infonce" in out["reason"]
    assert failed_models(out)["hc-infonce"].startswith("the positive control was not measured")
    out = positive_control({"hc": []}, {"hc-infonce": clip, "clip": clip}, ["hc-infonce"], ["clip"])
    assert "no held-out pair of dataset hc" in out["reason"]
    assert positive_control(items, {}, ["hc-infonce"], [])["reason"] == "no baseline (train.baselines is empty)"
    other = {"i2t": {"hc": {"zz": True}}}
    with pytest.raises(ValueError, match="i2t verdicts of hc-infonce on hc cover other pairs"):
        positive_control(items, {"hc-infonce": other, "clip": clip}, ["hc-infonce"], ["clip"])
    twice = {"hc": items["hc"] + items["hc"][:1]}
    with pytest.raises(ValueError, match="repeat an anchor_id"):
        positive_control(twice, {"hc-infonce": clip, "clip": clip}, ["hc-infonce"], ["clip"])
    assert read_heldout_verdicts(tmp_path, "clip") is None  # not scored
    (tmp_path / "clip.json").write_text(json.dumps({"suite": "heldout", "model": "clip",
                                                    "verdicts": {"hc": {"a0": True}}, "t2i": {"hc": {"a0": False}}}))
    assert read_heldout_verdicts(tmp_path, "clip") == {"i2t": {"hc": {"a0": True}}, "t2i": {"hc": {"a0": False}}}
    (tmp_path / "bad.json").write_text(json.dumps({"suite": "heldout"}))
    with pytest.raises(ValueError, match="bad.json: no 'verdicts'"):
        read_heldout_verdicts(tmp_path, "bad")


def test_mde_from_ci_is_the_normal_approximation():
    # a 95 % CI of width 2 * 1.96 SE: SE = 1, MDE = z_0.975 + z_0.8 = 2.80
    assert mde_from_ci(-1.959964, 1.959964) == pytest.approx(1.959964 + 0.841621, rel=1e-5)
    assert mde_from_ci(0.1, 0.1) == 0.0
    with pytest.raises(ValueError, match="low <= high"):
        mde_from_ci(0.2, 0.1)


def test_review_fixes_t2i_required_exact_gain_low_power_and_no_baseline():
    items = {"hc": [{"anchor_id": f"a{i}", "type": "attribute", "negative_image": f"n{i}.png"} for i in range(20)]}
    ids = _ids(items)
    good, bad = {i: True for i in ids}, {i: False for i in ids}
    # pairs with negative images: T2I is part of the criterion, so I2T alone is "not measured", never "passed"
    i2t_only = {"hc-infonce": {"i2t": {"hc": good}}, "clip": {"i2t": {"hc": bad}, "t2i": {"hc": bad}}}
    out = positive_control(items, i2t_only, ["hc-infonce"], ["clip"], n_resamples=50)
    assert out["status"] == "unavailable" and out["models"]["hc-infonce"]["passed"] is None
    assert "no T2I verdicts of hc-infonce on hc" in out["reason"]
    other = {"hc-infonce": {"i2t": {"lc": good}, "t2i": {"lc": good}}, "clip": {"i2t": {"hc": bad}, "t2i": {"hc": bad}}}
    assert "no I2T verdicts of hc-infonce on hc" in positive_control(items, other, ["hc-infonce"], ["clip"])["reason"]
    # a gain of exactly min_gain passes: 46 vs 16 discordant of 300 is 10 points (float: 9.999999999999998)
    m = {f"x{k}": k < 46 for k in range(300)}
    r = {f"x{k}": 46 <= k < 62 for k in range(300)}
    st = control_stats(m, r, min_gain=10, alpha=0.001, power=0.8, n_resamples=50, confidence_level=0.95, seed=0)
    assert st["mcnemar_p"] < 0.001 and st["passed"]
    with pytest.raises(ValueError, match="power 0.02 is too low for alpha 0.05"):
        mcnemar_mde(400, 0.1, alpha=0.05, power=0.02)
    # no baseline: every hard-negative model is "not measured", so its comparisons are marked
    none = positive_control(items, {}, ["hc-infonce"], [])
    assert failed_models(none) == {"hc-infonce": "the positive control was not measured (no baseline "
                                                 "(train.baselines is empty))"}
    assert summary_line({"status": "failed", "models": {}}).startswith("**FAILED** (gain over the baseline on the "
                                                                       "model's own held-out pairs, I2T / T2I in "
                                                                       "points, needs >= ? with McNemar p < ?)")


def _pairs(n_ref_right, fixes, breaks, n=310, dataset="hc"):
    """Verdicts over n pairs: the reference right on the first ``n_ref_right``; the model fixes ``fixes`` of the
    reference's errors and breaks ``breaks`` of its rights."""
    ref = {f"{dataset}{k}": k < n_ref_right for k in range(n)}
    model = {f"{dataset}{k}": (k >= breaks) if k < n_ref_right else (k < n_ref_right + fixes) for k in range(n)}
    return model, ref


def test_underpowered_is_neither_passed_nor_failed():
    kw = dict(min_gain=10, alpha=0.001, power=0.8, n_resamples=2000, confidence_level=0.95, seed=0,
              headroom_share=0.5)
    # clip right on 274 of 310 (88.4 %, 36 errors): 0.5 x 11.6 = 5.8 points required
    noisy_m, ref = _pairs(274, fixes=30, breaks=20)  # +10 pairs = +3.2 points on 50 discordant pairs
    noisy = control_stats(noisy_m, ref, **kw)
    assert noisy["required_gain_points"] == pytest.approx(100 * 18 / 310)
    assert noisy["gain_points"] == pytest.approx(100 * 10 / 310)
    assert noisy["ci_points"][0] < 0 < 5.8 < noisy["ci_points"][1]  # the CI holds 0 and the required 5.8
    assert noisy["verdict"] == "underpowered" and noisy["passed"] is False
    clean_m, _ = _pairs(274, fixes=9, breaks=0)  # +2.9 points on 9 discordant pairs: the CI rules 5.8 out
    clean = control_stats(clean_m, ref, **kw)
    assert clean["ci_points"][1] < clean["required_gain_points"] and clean["verdict"] == "failed"
    same = control_stats(ref, ref, **kw)  # a model identical to clip: CI [0, 0], failed (its MDE is not 0)
    assert same["ci_points"] == [0.0, 0.0] and same["mde_points"] > 5 and same["verdict"] == "failed"
    worse_m, _ = _pairs(274, fixes=0, breaks=100)  # 32 points worse: failed, however wide its MDE
    worse = control_stats(worse_m, ref, **kw)
    assert worse["mde_points"] > worse["required_gain_points"] and worse["verdict"] == "failed"
    strong_m, _ = _pairs(274, fixes=30, breaks=5)  # +25 pairs = +8.1 points, p = 2 * P(X <= 5 | 35) < 0.001
    assert control_stats(strong_m, ref, **kw)["verdict"] == "passed"

    # the study: hc's arm underpowered, lc's arm passes -> passed, hc's comparisons cannot be read
    lc_m, lc_ref = _pairs(100, fixes=150, breaks=0, n=263, dataset="lc")
    items = {"hc": [{"anchor_id": k, "type": "attribute"} for k in ref],
             "lc": [{"anchor_id": k, "type": "relation"} for k in lc_ref]}
    verdicts = {"hc-infonce": {"i2t": {"hc": noisy_m}}, "hc-cement": {"i2t": {"hc": strong_m}},
                "lc-infonce": {"i2t": {"lc": lc_m}},
                "clip": {"i2t": {"hc": ref, "lc": lc_ref}}}
    models = ["hc-infonce", "hc-cement", "lc-infonce"]
    out = positive_control(items, verdicts, models, ["clip"], n_resamples=2000)
    assert out["status"] == "passed" and out["passed"] is True
    assert out["failed"] == [] and out["underpowered"] == ["hc-infonce"]
    hc = out["models"]["hc-infonce"]
    assert (hc["verdict"], hc["passed"], hc["vs"]["clip"]["verdict"]) == ("underpowered", False, "underpowered")
    lo, hi = hc["vs"]["clip"]["i2t"]["ci_points"]
    assert hc["reason"] == (f"is underpowered vs clip: gain +3.2 points, CI [{lo:+.1f}, {hi:+.1f}] holds the "
                            "required 5.8")
    assert out["reason"] == "passed on lc-infonce; hc-infonce " + hc["reason"]
    assert failed_models(out) == {"hc-infonce": "the positive control was underpowered",
                                  "hc-cement": "its dataset's control arm hc-infonce underpowered"}
    line = summary_line(out)
    assert line.startswith("**PASSED**") and "hc-infonce +3.2 (needs 5.8, MDE " in line and "✗ underpowered;" in line
    assert line.endswith("marked ✗ cannot be read, nor those of the treatments on their datasets")
    md = positive_control_markdown(out)
    assert "| hc-infonce | control | | | | | | | | | | | | **UNDERPOWERED** |" in md
    assert "Every comparison below can be read." not in md
    assert "| **hc-infonce** | control | clip | hc all | I2T | 310 | 91.6 | 88.4 | +3.2 |" in md
    assert next(r for r in md.splitlines() if r.startswith("| **hc-infonce** |")).endswith("| underpowered |")
    # every arm underpowered: the study is not passed, its status says why
    alone = positive_control(items, verdicts, ["hc-infonce"], ["clip"], n_resamples=2000)
    assert (alone["status"], alone["passed"]) == ("underpowered", False)
    assert alone["reason"] == "no control arm could be decided: hc-infonce " + hc["reason"]
    assert summary_line(alone).startswith("**UNDERPOWERED**")
    # a failed arm beside an underpowered one: failed, and the reason names both
    failing = {**verdicts, "lc-infonce": {"i2t": {"lc": lc_ref}}}  # lc-infonce = clip on lc: CI [0, 0] < 10
    both = positive_control(items, failing, models, ["clip"], n_resamples=2000)
    assert both["status"] == "failed" and both["failed"] == ["lc-infonce"] and both["underpowered"] == ["hc-infonce"]
    assert both["reason"] == "1 of 2 control arms failed; hc-infonce " + hc["reason"]
    assert failed_models(both)["lc-infonce"] == "the positive control failed"
    assert summary_line(both).startswith("**FAILED**") and "lc-infonce +0.0 (needs 10.0, MDE " in summary_line(both)
    assert "| lc-infonce | control | | | | | | | | | | | | **FAILED** |" in positive_control_markdown(both)
    # a passing study with a treatment whose dataset has no control arm: not every comparison can be read
    orphan = positive_control(items, {**verdicts, "lc-cement": {"i2t": {"lc": lc_m}}}, ["hc-infonce", "lc-cement"],
                              ["clip"], n_resamples=200)
    assert failed_models(orphan)["lc-cement"] == "no control arm on lc"


def test_text_side_block_judges_tot_and_decides_an_underpowered_arm(tmp_path):
    # the held-out image pairs: 20, the arm +10 points on 2 discordant pairs in T2I (underpowered, as above)
    items = _items(images=True)
    ids = _ids(items)
    clip = {i: i in ("a0", "a1", "r0", "r1", "r2") for i in ids}
    weak = {i: clip[i] or i in ("a2", "a3") for i in ids}
    strong = {i: True for i in ids}
    main = positive_control(items, {"hc-infonce": {"i2t": {"hc": strong}, "t2i": {"hc": weak}},
                                    "clip": {"i2t": {"hc": clip}, "t2i": {"hc": clip}}},
                            ["hc-infonce"], ["clip"], n_resamples=200)
    assert main["status"] == "underpowered" and failed_models(main) == {
        "hc-infonce": "the positive control was underpowered"}
    # the text-side pairs: 400, clip right on 200, the arm on 300 (+25 points, 100 discordant one way): TOT only
    text = {"hc": [{"anchor_id": f"t{i}", "type": "object" if i % 2 else "attribute", "positive_caption": "p"}
                   for i in range(400)]}
    tids = _ids(text)
    tclip = {i: k < 200 for k, i in enumerate(tids)}
    tarm = {i: k < 300 for k, i in enumerate(tids)}
    side = positive_control(text, {"hc-infonce": {"tot": {"hc": tarm}}, "clip": {"tot": {"hc": tclip}}},
                            ["hc-infonce"], ["clip"], n_resamples=200)
    row = side["models"]["hc-infonce"]["vs"]["clip"]
    assert set(row) == {"tot", "by_type", "verdict", "passed"} and row["tot"]["gain_points"] == pytest.approx(25.0)
    assert row["tot"]["mcnemar_p"] == pytest.approx(2 * 0.5 ** 100) and side["status"] == "passed"
    assert side["criterion"]["pairs"] == "text-side" and "in TOT" in side["criterion"]["rule"]
    both = {**main, "text_side": side}
    assert failed_models(both) == {}  # underpowered on 20 image pairs, passed on 400 text-side pairs: readable
    line = summary_line(both)
    assert ". Text-side pairs (TOT): **PASSED** (control arms: the infonce fine-tune of each ConcreteBatch; gain " \
           "over clip on the model's own text-side pairs, TOT in points, needs >= 10" in line
    assert "hc-infonce +25.0 (needs 10.0, MDE " in line and "unless the text-side pairs below pass" in line
    md = positive_control_markdown(both)
    assert "\n### Text-side pairs (TOT)\n\n**PASSED**" in md
    assert "| **hc-infonce** | control | clip | hc all | TOT | 400 |" in md
    # an arm that *failed* on the image pairs is not rescued by the text side
    failed = {**main, "status": "failed", "models": {"hc-infonce": {**main["models"]["hc-infonce"],
                                                                    "verdict": "failed", "passed": False}}}
    assert failed_models({**failed, "text_side": side}) == {"hc-infonce": "the positive control failed"}
    # a text side that does not pass rescues nothing
    flat = positive_control(text, {"hc-infonce": {"tot": {"hc": tclip}}, "clip": {"tot": {"hc": tclip}}},
                            ["hc-infonce"], ["clip"], n_resamples=200)
    assert flat["status"] == "failed" and failed_models({**main, "text_side": flat}) == failed_models(main)
    # the verdict files of the text side read as TOT
    (tmp_path / "clip.json").write_text(json.dumps({"suite": "heldout_text", "verdicts": {"hc": {"t0": True}}}))
    assert read_heldout_verdicts(tmp_path, "clip") == {"tot": {"hc": {"t0": True}}}
    (tmp_path / "odd.json").write_text(json.dumps({"suite": "winoground", "verdicts": {}}))
    with pytest.raises(ValueError, match="odd.json: verdicts of suite 'winoground'"):
        read_heldout_verdicts(tmp_path, "odd")
