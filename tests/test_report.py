"""Tests for analysis.report: the SugarCrepe Markdown table and the gradient-ratio plot."""

import json

import pytest

from analysis.report import (
    GRADIENT_RATIO_TSV,
    plot_gradient_ratio,
    read_gradient_ratio,
    render_report,
    sugarcrepe_table,
)


def _result(acc_a, acc_b, micro, macro):
    return {
        "subsets": {
            "swap_obj": {"accuracy": acc_b, "n": 4, "correct": round(acc_b * 4)},
            "add_att": {"accuracy": acc_a, "n": 2, "correct": round(acc_a * 2)},
        },
        "micro_accuracy": micro,
        "macro_accuracy": macro,
        "n_items": 6,
    }


RESULTS = {
    "base": _result(0.5, 0.25, 2 / 6, 0.375),
    "hc-cement": _result(1.0, 0.75, 5 / 6, 0.875),
}

EXPECTED_TABLE = (
    "| model | add_att | swap_obj | micro | macro |\n"
    "|---|---:|---:|---:|---:|\n"
    "| base | 0.500 | 0.250 | 0.333 | 0.375 |\n"
    "| hc-cement | 1.000 | 0.750 | 0.833 | 0.875 |\n"
    "| n | 2 | 4 | 6 | - |\n"
)


def test_sugarcrepe_table_two_models():
    assert sugarcrepe_table(RESULTS) == EXPECTED_TABLE


def test_sugarcrepe_table_rejects_mismatched_or_bad_results():
    other = _result(0.5, 0.5, 0.5, 0.5)
    other["subsets"]["add_att"]["n"] = 3
    with pytest.raises(ValueError, match="other items"):
        sugarcrepe_table({"base": RESULTS["base"], "x": other})
    with pytest.raises(ValueError, match="lacks 'macro_accuracy'"):
        sugarcrepe_table({"x": {"subsets": {}, "micro_accuracy": 0.5, "n_items": 1}})
    with pytest.raises(ValueError, match=r"micro_accuracy = 1.5"):
        sugarcrepe_table({"x": _result(0.5, 0.5, 1.5, 0.5)})
    with pytest.raises(ValueError, match="empty"):
        sugarcrepe_table({})


def _write_tsv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("step\tgradient_ratio\n" + "".join(f"{s}\t{v}\n" for s, v in rows))


def test_read_gradient_ratio_and_errors(tmp_path):
    p = tmp_path / "g.tsv"
    _write_tsv(p, [(0, 0.3), (1, 0.25)])
    df = read_gradient_ratio(p)
    assert df["step"].tolist() == [0, 1] and df["gradient_ratio"].tolist() == [0.3, 0.25]
    _write_tsv(p, [(0, 0.3), (1, "nan")])
    with pytest.raises(ValueError, match="row 2"):
        read_gradient_ratio(p)
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        read_gradient_ratio(tmp_path / "missing.tsv")


def test_dvclive_writes_the_layout_we_read(tmp_path, monkeypatch):
    dvclive = pytest.importorskip("dvclive")
    monkeypatch.chdir(tmp_path)  # dvclive may touch the working directory; keep it out of the repo
    live = dvclive.Live(str(tmp_path / "run"), dvcyaml=None, save_dvc_exp=False, report=None)
    for v in (0.5, 0.4, 0.2):
        live.log_metric("train/gradient_ratio", v)
        live.next_step()
    live.end()
    df = read_gradient_ratio(tmp_path / "run" / GRADIENT_RATIO_TSV)
    assert df["step"].tolist() == [0, 1, 2]
    assert df["gradient_ratio"].tolist() == [0.5, 0.4, 0.2]


def test_plot_and_render_report(tmp_path):
    runs = {}
    for label, rows in {"infonce": [(0, 0.3), (1, 0.2), (2, 0.18)], "cement": [(0, 0.3), (1, 0.35), (2, 0.4)]}.items():
        _write_tsv(tmp_path / label / GRADIENT_RATIO_TSV, rows)
        runs[label] = tmp_path / label
    png = plot_gradient_ratio({k: v / GRADIENT_RATIO_TSV for k, v in runs.items()}, tmp_path / "out" / "g.png")
    data = png.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="runs is empty"):
        plot_gradient_ratio({}, tmp_path / "x.png")

    eval_paths = {}
    for label, res in RESULTS.items():
        eval_paths[label] = tmp_path / f"{label}.json"
        eval_paths[label].write_text(json.dumps(res))
    out = render_report(eval_paths, runs, tmp_path / "report")
    md = out["sugarcrepe"].read_text()
    assert md.startswith("# SugarCrepe\n") and md.endswith(EXPECTED_TABLE)
    assert out["gradient_ratio"] == tmp_path / "report" / "gradient_ratio.png"
    assert out["gradient_ratio"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_axes_saves_on_success_and_writes_nothing_on_error(tmp_path):
    import matplotlib.pyplot as plt

    from analysis.report import figure_axes

    before = len(plt.get_fignums())
    with figure_axes(tmp_path / "ok" / "f.png") as ax:
        ax.plot([0, 1], [0, 1])
    assert (tmp_path / "ok" / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(KeyError, match="boom"):
        with figure_axes(tmp_path / "bad.png") as ax:
            raise KeyError("boom")
    assert not (tmp_path / "bad.png").exists()
    assert len(plt.get_fignums()) == before  # both figures closed
