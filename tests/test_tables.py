"""Paper Tab. 2 / Tab. 3 rendering, the paired statistics (bootstrap CI, Holm, exact McNemar) and the held-out plot,
on tiny hand-computed fake results."""

import math

import pytest

from analysis.tables import comparisons_markdown, latex_escape, plot_heldout, table2, table3
from concrete_jungle.evaluation.paired import holm, paired_bootstrap_ci, paired_comparison

MODELS = ["base", "clip", "hc-cement"]


def _ok(metrics):
    return {"suite": "x", "model": "m", "checkpoint": None, "precision": "fp32", "available": True, "reason": None,
            "metrics": metrics, "n": {}}


def _skipped(reason):
    return {"suite": "x", "model": "m", "checkpoint": None, "precision": "fp32", "available": False,
            "reason": reason, "metrics": {}, "n": {}}


def _sc(**accs):
    subsets = {k: {"accuracy": v, "n": 20, "correct": round(20 * v)} for k, v in accs.items()}
    return {"subsets": subsets, "micro_accuracy": sum(accs.values()) / len(accs),
            "macro_accuracy": sum(accs.values()) / len(accs)}


# per model: SC swap_obj, add_att; SC++ ITT, TOT (macro); Winoground text, image, group
ROWS = {"base": (0.50, 0.60, 0.40, 0.30, 0.30, 0.10, 0.05),
        "clip": (0.60, 0.70, 0.50, 0.40, 0.35, 0.15, 0.10),
        "hc-cement": (0.70, 0.80, 0.55, 0.45, 0.40, 0.20, 0.15)}


def _results2(pp_skipped=False):
    out = {"sugarcrepe": {}, "sugarcrepe_pp": {}, "winoground": {}}
    for m, (so, aa, itt, tot, wt, wi, wg) in ROWS.items():
        out["sugarcrepe"][m] = _ok(_sc(swap_obj=so, add_att=aa))
        out["sugarcrepe_pp"][m] = (_skipped("SugarCrepe++ files absent: data/sc_pp (see README)") if pp_skipped
                                   else _ok({"itt": {**_sc(add_att=1.0), "macro_accuracy": itt},
                                             "tot": {**_sc(add_att=1.0), "macro_accuracy": tot}}))
        out["winoground"][m] = _ok({"text": wt, "image": wi, "group": wg, "by_tag": {}})
    return out


def _table_rows(md):
    return [line for line in md.splitlines() if line.startswith("| ")]


def test_table2_macro_average_and_relative_gain_by_hand():
    md, tex = table2(_results2(), MODELS)
    header, *rows = _table_rows(md)
    # subsets in the paper's order (add_att before swap_obj), then SC++, Winoground, M.Avg, gain
    assert header == ("| Model | SC add_att | SC swap_obj | SC++ ITT | SC++ TOT | WG text | WG image | WG group | "
                      "M.Avg | Rel. gain (%) |")
    # base: (.6 + .5 + .4 + .3 + .3 + .1 + .05) / 7 = 2.25 / 7 = 32.14 %
    assert rows[0] == "| base | 60.0 | 50.0 | 40.0 | 30.0 | 30.0 | 10.0 | 5.0 | 32.1 | ref. |"
    # clip: 2.8 / 7 = 40.0 %; gain (2.8 - 2.25) / 2.25 = +24.44 %
    assert rows[1] == "| clip | 70.0 | 60.0 | 50.0 | 40.0 | 35.0 | 15.0 | 10.0 | 40.0 | +24.44 |"
    # hc-cement: 3.25 / 7 = 46.43 %; gain (3.25 - 2.25) / 2.25 = +44.44 %
    assert rows[2] == "| hc-cement | 80.0 | 70.0 | 55.0 | 45.0 | 40.0 | 20.0 | 15.0 | 46.4 | +44.44 |"
    assert "mean of the 7 columns" in md
    assert "13.13 % relative M.Avg over the CLIP baseline" in md
    assert "hc-cement vs clip: +16.07 %" in md  # (3.25 - 2.8) / 2.8
    # rows follow the given order; another base changes the reference
    md_clip, _ = table2(_results2(), ["clip", "base"], base="clip")
    assert [r.split(" | ")[0] for r in _table_rows(md_clip)[1:]] == ["| clip", "| base"]
    assert _table_rows(md_clip)[2].endswith("| 32.1 | -19.64 |")  # (2.25 - 2.8) / 2.8
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex
    assert "\\multicolumn{2}{c}{SugarCrepe}" in tex and "add\\_att" in tex
    assert "hc-cement & 80.0 & 70.0 & 55.0 & 45.0 & 40.0 & 20.0 & 15.0 & 46.4 & +44.44 \\\\" in tex


def test_table2_notes_a_suite_scored_over_other_subsets():
    # issue 22 item 4: a result's subset_set says "all" was taken over other subsets than the benchmark's own
    results = _results2()
    assert "other subsets" not in table2(results, MODELS)[0]
    for m in ("base", "clip"):
        results["sugarcrepe"][m]["subset_set"] = {"scored": ["add_att", "swap_obj", "mine"], "extra": ["mine"],
                                                  "absent": ["replace_rel"], "dropped_empty": [], "complete": False}
    md, tex = table2(results, MODELS)
    note = "SugarCrepe scored over other subsets than the benchmark's own: absent replace_rel; added mine."
    assert md.count(note) == 1
    assert "absent replace\\_rel" in tex


def test_table2_skipped_suite_shows_dash_and_its_reason():
    results = _results2(pp_skipped=True)
    del results["winoground"]["hc-cement"]  # no result file at all for one model
    md, tex = table2(results, MODELS)
    rows = _table_rows(md)[1:]
    # SC++ skipped everywhere, Winoground missing for hc-cement: M.Avg over the 2 SugarCrepe columns only
    assert rows[0] == "| base | 60.0 | 50.0 | —[^1] | —[^1] | 30.0 | 10.0 | 5.0 | 55.0 | ref. |"
    assert rows[2] == "| hc-cement | 80.0 | 70.0 | —[^1] | —[^1] | —[^2] | —[^2] | —[^2] | 75.0 | +36.36 |"
    assert ("[^1]: SugarCrepe++: SugarCrepe++ files absent: data/sc_pp (see README) (models: base, clip, hc-cement)"
            in md)
    assert "[^2]: Winoground: no result file (models: hc-cement)" in md
    assert "mean of the 2 columns" in md
    assert "---\\textsuperscript{1}" in tex and "data/sc\\_pp" in tex
    # an absent subset for one model is a dash too, never a number
    results = _results2()
    del results["sugarcrepe"]["clip"]["metrics"]["subsets"]["swap_obj"]
    md, _ = table2(results, MODELS)
    assert _table_rows(md)[2].startswith("| clip | 70.0 | —[^1] |")
    assert "SugarCrepe swap_obj: subset absent from the result (models: clip)" in md


def test_table2_without_base_row_and_bad_values():
    md, _ = table2(_results2(), ["clip", "hc-cement"])
    assert "base model 'base' is not a row of the table" in md
    bad = _results2()
    bad["winoground"]["clip"]["metrics"]["text"] = 35.0  # points, not a fraction
    with pytest.raises(ValueError, match="winoground result of model 'clip', WG text = 35.0"):
        table2(bad, MODELS)
    with pytest.raises(ValueError, match="twice"):
        table2(_results2(), ["base", "base"])


def test_latex_escaping():
    assert latex_escape("hc_cement & 50% #1 $x$") == r"hc\_cement \& 50\% \#1 \$x\$"
    assert latex_escape("a{b}~^\\") == r"a\{b\}\textasciitilde{}\textasciicircum{}\textbackslash{}"
    assert latex_escape("—") == "---"
    results = _results2(pp_skipped=True)
    results["sugarcrepe_pp"]["base"]["reason"] = "no file 100% & data_dir"
    _, tex = table2(results, MODELS)
    assert r"no file 100\% \& data\_dir" in tex
    assert "100% & data_dir" not in tex


def _probe(x, *, eurosat=True):
    tasks = {"imagenet": {"top1": x, "top5": x + 0.3, "C": 1.0, "C_at_edge": None, "group": "imagenet"},
             "coco": {"map": x - 0.1, "C": 1.0, "C_at_edge": None, "group": "coco"},
             "dtd": {"top1": x + 0.1, "C": 0.1, "C_at_edge": None, "group": "natural"},
             "clevr": {"top1": x - 0.2, "C": 10.0, "C_at_edge": None, "group": "structured"}}
    if eurosat:
        tasks["eurosat"] = {"available": False, "reason": "vtab eurosat folder absent"}
    return _ok({"tasks": tasks, "groups": {"natural": x + 0.1, "structured": x - 0.2}})


def _retrieval(x):
    return _ok({"flickr30k": {"i2t": {"R@1": x - 0.1, "R@5": x + 0.2, "R@10": x + 0.3},
                              "t2i": {"R@1": x - 0.2, "R@5": x + 0.1, "R@10": x + 0.2}},
                "coco": {"available": False, "reason": "coco karpathy json absent"}})


def test_table3_columns_vtab_groups_and_macro_average_by_hand():
    results = {"probe": {"base": _probe(0.5), "clip": _probe(0.45)},
               "retrieval": {"base": _retrieval(0.5), "clip": _retrieval(0.45)}}
    md, tex = table3(results, ["base", "clip"])
    header, base, clip = _table_rows(md)
    assert header == ("| Model | imagenet top-1 | imagenet top-5 | coco mAP | dtd top-1 | clevr top-1 | "
                      "eurosat (probe) | VTAB natural | VTAB structured | VTAB mean | flickr30k I2T R@1 | "
                      "flickr30k I2T R@5 | flickr30k I2T R@10 | flickr30k T2I R@1 | flickr30k T2I R@5 | "
                      "flickr30k T2I R@10 | coco retrieval | M.Avg | Rel. gain (%) |")
    # M.Avg over 11 columns: imagenet top-1/top-5, coco mAP, VTAB natural/structured (not dtd / clevr / the VTAB
    # mean, which would count VTAB twice), six recalls: (.5 + .8 + .4 + .6 + .3 + .4 + .7 + .8 + .3 + .6 + .7) / 11
    assert base == ("| base | 50.0 | 80.0 | 40.0 | 60.0 | 30.0 | —[^1] | 60.0 | 30.0 | 45.0 | 40.0 | 70.0 | "
                    "80.0 | 30.0 | 60.0 | 70.0 | —[^2] | 55.5 | ref. |")
    # every column 5 points lower: (6.1 - 0.55) / 11 = 50.45 %; gain -0.55 / 6.1 = -9.02 %
    assert clip.endswith("| —[^2] | 50.5 | -9.02 |")
    assert "[^1]: probe task eurosat: vtab eurosat folder absent (models: base, clip)" in md
    assert "[^2]: retrieval set coco: coco karpathy json absent (models: base, clip)" in md
    assert "mean of the 11 columns" in md and "VTAB through its group means" in md
    assert "2.16 % relative in general representation and 1.18 % relative in compositional" in md
    assert "\\multicolumn{3}{c}{VTAB}" in tex and "\\multicolumn{6}{c}{flickr30k retrieval}" in tex
    assert "\\bottomrule" in tex


def test_table3_skipped_suite_and_set_recorded_beside_the_metrics():
    results = {"probe": {"base": _probe(0.5, eurosat=False), "clip": _skipped("evaluate.probe.tasks is empty")},
               "retrieval": {"base": {**_retrieval(0.5), "unavailable": {"f8k": "Flickr8k token file absent"}}}}
    md, _ = table3(results, ["base", "clip"])
    rows = _table_rows(md)
    assert "f8k retrieval" in rows[0]
    assert rows[2].startswith("| clip | —[^4] | —[^4] |")
    assert "linear probe: evaluate.probe.tasks is empty (models: clip)" in md
    assert "retrieval set f8k: Flickr8k token file absent (models: base)" in md
    assert "retrieval: no result file (models: clip)" in md
    with pytest.raises(ValueError, match="none of the suites"):
        table3({"winoground": {}}, ["base"])


def test_table3_reads_the_score_probe_layout():
    # concrete_jungle.evaluation.linear_probe.score_probe: tasks directly under metrics, groups beside them,
    # unavailable tasks recorded beside the metrics; a VTAB task's group comes from its name (dtd: natural)
    def res(x):
        return {**_ok({"imagenet": {"top1": x, "top5": x + 0.3, "C": 1.0, "val_top1": x},
                       "coco": {"map": x - 0.1, "p_at_1": x, "C": 1.0, "val_map": x},
                       "dtd": {"top1": x + 0.1, "C": 1.0, "val_top1": x},
                       "groups": {"imagenet": x, "coco": x - 0.1, "natural": x + 0.1, "vtab_mean_of_groups": x + 0.1,
                                  "vtab_mean_of_tasks": x + 0.1}}),
                "unavailable": {"eurosat": "vtab-1k/eurosat absent"}}
    md, _ = table3({"probe": {"base": res(0.5), "clip": res(0.4)}}, ["base", "clip"])
    header, base, clip = _table_rows(md)
    assert header == ("| Model | imagenet top-1 | imagenet top-5 | coco mAP | dtd top-1 | eurosat (probe) | "
                      "VTAB natural | VTAB mean | M.Avg | Rel. gain (%) |")
    # M.Avg over imagenet top-1 / top-5, coco mAP, VTAB natural: (.5 + .8 + .4 + .6) / 4 = 57.5 %
    assert base == "| base | 50.0 | 80.0 | 40.0 | 60.0 | —[^1] | 60.0 | 60.0 | 57.5 | ref. |"
    assert clip == "| clip | 40.0 | 70.0 | 30.0 | 50.0 | —[^1] | 50.0 | 50.0 | 47.5 | -17.39 |"  # -.4 / 2.3
    assert "[^1]: probe task eurosat: vtab-1k/eurosat absent (models: base, clip)" in md
    assert "Not evaluated (no result): retrieval." in md
    # these fits record no C_at_edge: a fixed grid, before the search for C (issue 29), not counted as interior
    assert "6 probe fits predate the search for C (a fixed grid; their C may be an end of it)." in md
    assert "the search for C stopped" not in md


def test_table3_names_the_probe_fits_whose_c_is_at_an_edge():
    results = {"probe": {"base": _probe(0.5), "clip": _probe(0.45)}}
    results["probe"]["clip"]["metrics"]["tasks"]["dtd"]["C_at_edge"] = "high"
    results["probe"]["clip"]["metrics"]["tasks"]["dtd"]["C"] = 1e6
    md, _ = table3(results, ["base", "clip"])
    # 4 fits a model (eurosat unavailable): 1 of 8 at the search's bound
    assert ("Linear probes: the search for C stopped at its bound, that end still the best, in 1 of 8 fits: "
            "clip / dtd (C = 1e+06, high).") in md and "predate" not in md
    del results["probe"]["base"]["metrics"]["tasks"]["coco"]["C_at_edge"]  # a fit from before the search
    results["probe"]["clip"]["metrics"]["tasks"]["dtd"]["C_at_edge"] = None
    md, _ = table3(results, ["base", "clip"])
    assert ("the search for C stopped at its bound, that end still the best, in 0 of 7 fits. 1 probe fits predate "
            "the search for C") in md


# 10 items over two subsets (as tests/test_paired.py): A right on 8, B on 6; discordant 3 (only A) vs 1 (only B)
A = {"x": {"0": True, "1": True, "2": True, "3": False},
     "y": {"0": True, "1": True, "2": True, "3": True, "4": False, "5": True}}
B = {"x": {"0": True, "1": False, "2": False, "3": False},
     "y": {"0": True, "1": True, "2": True, "3": False, "4": True, "5": True}}
C = {s: {k: True for k in items} for s, items in A.items()}  # right everywhere: 4 discordant vs B, all for C


def test_bootstrap_ci_contains_the_estimate_and_is_seeded():
    for method in ("BCa", "percentile"):
        ci = paired_bootstrap_ci(A, B, n_resamples=999, method=method, seed=3)
        assert ci["delta"] == pytest.approx(0.2) and ci["n"] == 10 and ci["method"] == method
        assert -1 <= ci["low"] < 0.2 < ci["high"] <= 1
        assert all(math.isfinite(ci[k]) for k in ("delta", "low", "high"))
        assert paired_bootstrap_ci(A, B, n_resamples=999, method=method, seed=3) == ci
    # the pairing matters: B vs A is the mirror image
    mirror = paired_bootstrap_ci(B, A, n_resamples=999, method="percentile", seed=3)
    ci = paired_bootstrap_ci(A, B, n_resamples=999, method="percentile", seed=3)
    assert mirror["low"] == pytest.approx(-ci["high"]) and mirror["high"] == pytest.approx(-ci["low"])


def test_bootstrap_ci_degenerate_and_fallback():
    same = paired_bootstrap_ci(A, A, n_resamples=99)
    assert (same["delta"], same["low"], same["high"], same["method"]) == (0.0, 0.0, 0.0, "degenerate")
    allright = paired_bootstrap_ci(C, {s: {k: False for k in it} for s, it in C.items()}, n_resamples=99)
    assert (allright["low"], allright["high"]) == (1.0, 1.0)
    # one resample: BCa's bias correction is infinite -> the percentile interval of the same resample, finite
    one = {"s": {str(i): i == 0 for i in range(50)}}
    none = {"s": {str(i): False for i in range(50)}}
    fb = paired_bootstrap_ci(one, none, n_resamples=1, method="BCa", seed=0)
    assert fb["fallback"] and fb["method"] == "percentile"
    assert math.isfinite(fb["low"]) and math.isfinite(fb["high"]) and fb["low"] <= fb["high"]
    with pytest.raises(ValueError, match="method"):
        paired_bootstrap_ci(A, B, method="basic")
    with pytest.raises(ValueError, match="n_resamples"):
        paired_bootstrap_ci(A, B, n_resamples=0)
    with pytest.raises(ValueError, match=r"paired_bootstrap_ci: the models were scored on different items"):
        paired_bootstrap_ci(A, {"x": B["x"]})


def test_holm_known_values():
    # sorted 0.01, 0.03, 0.04 -> x3, x2, x1 = 0.03, 0.06, 0.04 -> monotone: 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []
    assert holm([0.02]) == pytest.approx([0.02])
    with pytest.raises(ValueError, match="p-value 1 is nan"):
        holm([0.1, float("nan")])
    with pytest.raises(ValueError, match="p-value 0 is 1.5"):
        holm([1.5])


def test_mcnemar_is_still_exact():
    assert paired_comparison(A, B)["mcnemar_p"] == pytest.approx(0.625)  # 2 * P(X <= 1 | 4, 1/2) = 10/16
    assert paired_comparison(C, B)["mcnemar_p"] == pytest.approx(0.125)  # 2 * (1/2)^4
    five = {"s": {str(i): i < 5 for i in range(8)}}
    zero = {"s": {str(i): False for i in range(8)}}
    assert paired_comparison(five, zero)["mcnemar_p"] == pytest.approx(2 / 32)


def test_comparisons_markdown_rows_holm_family_and_missing_pairs():
    flat = {"0": True, "1": False, "2": True}
    verdicts = {"sugarcrepe": {"a": A, "b": B, "c": C},
                "heldout": {"a": {"hc": flat, "lc": flat}, "b": {"hc": {"0": False, "1": False, "2": True}},
                            "c": {"hc": flat}},
                "winoground": {"a": {"text": flat, "image": flat, "group": flat}}}
    md = comparisons_markdown(verdicts, [("a", "b"), ("c", "b")], n_resamples=999)
    section = md.split("### SugarCrepe")[1].split("###")[0]
    assert "Family: the 2 pair(s) of this table (Holm over m = 2)." in section
    rows = [line for line in section.splitlines() if line.startswith("| a ") or line.startswith("| c ")]
    # raw p 0.625 and 0.125; Holm: 0.125 * 2 = 0.25, max(0.625 * 1, 0.25) = 0.625
    assert rows[0].startswith("| a | b | 10 | 80.0 | 60.0 | +20.0 | [")
    # MDE at alpha 0.05, 80 % power, n = 10, 4 discordant items: Connor's equation solved for delta = 0.616
    assert rows[0].endswith("| 3 / 1 | 0.625 | 0.625 | 61.6 | none detectable (MDE 61.6) |")
    assert rows[1].startswith("| c | b | 10 | 100.0 | 60.0 | +40.0 | [")
    assert rows[1].endswith("| 4 / 0 | 0.125 | 0.250 | 61.6 | none detectable (MDE 61.6) |")
    assert "## Positive control" not in md  # no control given
    # a delta as large as its MDE that Holm does not carry is "not significant after Holm", not "none detectable"
    wide = {"sugarcrepe": {"a": {"s": {str(i): i < 8 for i in range(400)}}, "b": {"s": {str(i): False for i in range(400)}},
                           **{f"c{k}": {"s": {str(i): False for i in range(400)}} for k in range(17)}}}
    family = [("a", "b")] + [(f"c{k}", "b") for k in range(17)]
    row = next(line for line in comparisons_markdown(wide, family, n_resamples=99).splitlines()
               if line.startswith("| a | b |"))
    assert "| 8 / 0 | 0.008 | 0.141 | 2.0 | not significant after Holm (MDE 2.0) |" in row
    marked = comparisons_markdown(verdicts, [("a", "b"), ("c", "b")], n_resamples=99,
                                  unreadable={"c": "failed the positive control"},
                                  control={"status": "failed", "reason": "1 of 2 hard-negative fine-tunes did not "
                                           "pass", "criterion": {"rule": "the rule"}, "models": {}})
    assert marked.startswith("## Positive control\n\n**FAILED**: the rule. 1 of 2")
    assert marked.index("## Positive control") < marked.index("## Paired comparisons")
    assert "**Cannot be read**: rows with c (failed the positive control)" in marked
    sc = marked.split("### SugarCrepe")[1].split("###")[0]
    assert [line.rsplit("|", 2)[1].strip() for line in sc.splitlines() if line.startswith(("| a ", "| c "))] == \
        ["none detectable (MDE 61.6)", "✗ cannot be read (c)"]
    assert "### Held-out pairs hc, I2T" in md and "### Held-out pairs lc, I2T" in md
    lc = md.split("### Held-out pairs lc, I2T")[1].split("###")[0]
    assert "No pair has per-item verdicts on this headline." in lc
    assert "a vs b (b has none); c vs b (c, b has none)" in lc
    assert "Winoground group score" in md and "all pairs of one headline" in md
    with pytest.raises(KeyError, match="'zz'"):
        comparisons_markdown(verdicts, [("zz", "b")])
    with pytest.raises(ValueError, match="unknown suites"):
        comparisons_markdown(verdicts, [("a", "b")], include=("nope",))


def test_plot_heldout_writes_a_png(tmp_path):
    def res(shift):
        bins = {"[4.5, 5.0]": {"i2t": 0.8 + shift, "n": 5}, "[1.0, 3.0)": {"i2t": 0.55 + shift, "n": 12},
                "[3.0, 4.0)": {"i2t": 0.6 + shift, "n": 9}}
        return _ok({d: {"i2t": 0.7 + shift, "by_type": {}, "by_c_bin": bins} for d in ("hc", "lc", "wo")})
    out = plot_heldout({"base": res(0.0), "hc-cement": res(0.1), "clip": _skipped("no held-out pair")},
                       tmp_path / "plots" / "heldout.png")
    assert out.is_file() and out.stat().st_size > 1024
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_heldout({"clip": _skipped("no held-out pair")}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_visibility_markdown_rows():
    from analysis.tables import visibility_markdown

    vis = {"base": {"cosine": {"relation": {"image": 0.9991, "text": 0.998, "n": 152},
                               "random": {"image": 0.1, "text": 0.2, "n": 800}},
                    "probe": {"relation": {"accuracy": 0.31, "majority": 0.349, "n": 200, "classes": 4},
                              "object": {"skipped": "fewer than 2 values", "n": 3, "classes": 1}}},
           "clip": {"skipped": "no held-out pair"}}
    md = visibility_markdown(vis)
    assert md.startswith("## Can the models see the edits?")
    row = next(line for line in md.splitlines() if line.startswith("| base |"))
    assert row == "| base | — | 0.999 / 0.998 | — | 0.100 / 0.200 | — | 31.0 / 34.9 (n = 200, 4 values) | — |"
    assert next(line for line in md.splitlines() if line.startswith("| clip |")) == \
        "| clip | skipped: no held-out pair | — | — | — | — | — | — |"  # 1 + 6 cells: the header's 8 columns
