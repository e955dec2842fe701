"""Tests for analysis.report: the gradient-ratio curves and figure helpers (the paper's tables: test_tables.py)."""

import pytest

from analysis.report import GRADIENT_RATIO_TSV, plot_gradient_ratio, read_gradient_ratio


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


def test_plot_gradient_ratio(tmp_path):
    runs = {}
    for label, rows in {"infonce": [(0, 0.3), (1, 0.2), (2, 0.18)], "cement": [(0, 0.3), (1, 0.35), (2, 0.4)]}.items():
        _write_tsv(tmp_path / label / GRADIENT_RATIO_TSV, rows)
        runs[label] = tmp_path / label
    png = plot_gradient_ratio({k: v / GRADIENT_RATIO_TSV for k, v in runs.items()}, tmp_path / "out" / "g.png")
    data = png.read_bytes()
    assert len(data) > 1000 and data[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="runs is empty"):
        plot_gradient_ratio({}, tmp_path / "x.png")


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


def test_plot_learning_curves_panels_and_errors(tmp_path):
    from analysis.report import plot_learning_curves

    curves = {"hc-infonce": {"hc": {"all_i2t": [(0, 0.7), (10, 0.8)], "relation_i2t": [(0, 0.5), (10, 0.6)]}},
              "clip": {"hc": {"all_i2t": [(0, 0.7), (10, 0.72)]}, "lc": {"all_i2t": [(0, 0.5), (10, 0.5)]}},
              "lc-infonce": {"lc": {"all_i2t": [(0, 0.5), (10, 0.6)]}}}
    out = plot_learning_curves(curves, {"hc-infonce": "hc", "lc-infonce": "lc"}, ["clip"], tmp_path / "lc.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    w, h = Image.open(out).size
    assert w > h  # 2 datasets x 2 groups (all, relation) at 3.2 x 2.6 inches a panel
    with pytest.raises(ValueError, match="no learning curve logged"):
        plot_learning_curves({"clip": {}}, {"hc-infonce": "hc"}, ["clip"], tmp_path / "none.png")
