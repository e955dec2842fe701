"""A hyper-parameter sweep read back from DVC experiments: accuracy against the swept value (paper Sec. 2.3's
Cement temperature tau_m by default), the way the repository is meant to be used::

    dvc exp run -S margin.tau=0.05   # one experiment at a time, in the workspace
    dvc exp run -S margin.tau=0.3    # (the end-to-end test runs this one; or queue them: dvc exp run --queue -S
                                     # ...; then dvc exp run --run-all)
    dvc exp show --only-changed      # the table; `dvc metrics diff <exp>` for one experiment against HEAD
    python analysis/sweep.py --param margin.tau

Each experiment re-runs only what ``margin.tau`` reaches (the margin trainings, their encodings, the scoring, the
gradient-ratio study and the report). This script calls ``dvc exp show --json`` (or reads its saved output with
``--exp-show``), takes the swept param and the chosen metrics of the baseline commit and of every experiment, and
writes ``metrics/<profile>/sweep_<param>.json`` (one point per run) and ``reports/<profile>/sweep_<param>.png``
(one line per metric against the param).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

__all__ = ["DEFAULT_METRICS", "sweep_points", "plot_sweep", "main"]

#: name -> (metrics file pattern, dotted key): SugarCrepe micro accuracy of each Cement fine-tune, held-out I2T on its
#: own dataset's pairs, and the last logged gradient ratio of its training run.
DEFAULT_METRICS = {
    **{f"SugarCrepe {d}-cement": (f"metrics/{{profile}}/evaluate/sugarcrepe/{d}-cement.json", "metrics.micro_accuracy")
       for d in ("hc", "lc", "wo")},
    **{f"held-out {d} pairs, {d}-cement": (f"metrics/{{profile}}/evaluate/heldout/{d}-cement.json", f"metrics.{d}.i2t")
       for d in ("hc", "lc", "wo")},
}


def _get(data: Mapping, dotted: str):
    for part in dotted.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data


def _runs(exp_show: Sequence[Mapping]):
    """(label, data) of the baseline commits and their experiments in ``dvc exp show --json`` output (the
    workspace entry is left out: it repeats the last run)."""
    for entry in exp_show:
        if entry.get("rev") != "workspace" and entry.get("data"):
            yield entry.get("name") or entry["rev"][:7], entry["data"]
        for exp in entry.get("experiments") or []:
            for rev in exp.get("revs") or []:
                if rev.get("data"):
                    yield rev.get("name") or rev["rev"][:7], rev["data"]


def sweep_points(exp_show: Sequence[Mapping], param: str, metrics: Mapping[str, tuple[str, str]],
                 params_file: str = "params.yaml", profile: str = "world") -> list[dict]:
    """One point per run (the baseline commits and every experiment): ``{"run", param: value, <metric>: value}``,
    sorted by the param; runs whose param or metrics are missing or not finite are left out.

    Args:
        exp_show: the parsed output of ``dvc exp show --json``.
        param: dotted params key (``"margin.tau"``).
        metrics: name -> (metrics file, with ``{profile}``; dotted key inside its data).
        params_file: the params file of the profile.
        profile: fills ``{profile}`` in the metrics paths.

    Raises:
        ValueError: ``exp_show`` is not a list (not ``dvc exp show --json`` output).
    """
    if not isinstance(exp_show, list):
        raise ValueError("sweep_points: expected the list that `dvc exp show --json` prints")
    points, seen = [], set()
    for name, data in _runs(exp_show):
        value = _get((data.get("params") or {}).get(params_file, {}).get("data", {}), param)
        row = {"run": name, param: value}
        for metric, (path, key) in metrics.items():
            row[metric] = _get(((data.get("metrics") or {}).get(path.format(profile=profile)) or {}).get("data", {}),
                               key)
        values = [row[param], *(row[m] for m in metrics)]
        if any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
            continue
        key = tuple(values)
        if key not in seen:  # a baseline shown twice (HEAD and its branch) is one point
            seen.add(key)
            points.append(row)
    return sorted(points, key=lambda r: r[param])


def plot_sweep(points: Sequence[Mapping], param: str, metrics: Sequence[str], path: str | os.PathLike) -> Path:
    """One line per metric (accuracy, 0-1) against ``param``; a point per run, labelled by the run's name.

    Raises:
        ValueError: no point.
    """
    import matplotlib.pyplot as plt

    from analysis.report import save_figure

    if not points:
        raise ValueError("plot_sweep: no run has the param and every metric; nothing to plot")
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = [p[param] for p in points]
    for metric in metrics:
        ax.plot(xs, [p[metric] for p in points], "o-", label=metric)
    ax.set_xlabel(param)
    ax.set_ylabel("accuracy")
    ax.set_title(f"Sweep of {param} ({len(points)} runs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")
    save_figure(fig, path)
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    """CLI (see the module docstring); prints the points as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--param", default="margin.tau", help="dotted params key that was swept")
    ap.add_argument("--params-file", default="params.yaml")
    ap.add_argument("--profile", default="world")
    ap.add_argument("--exp-show", type=Path, help="saved `dvc exp show --json` output (default: run it)")
    args = ap.parse_args(argv)
    if args.exp_show:
        exp_show = json.loads(args.exp_show.read_text())
    else:
        proc = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"], capture_output=True, text=True,
                              check=True)
        exp_show = json.loads(proc.stdout)
    from concrete_jungle.io import write_metrics

    points = sweep_points(exp_show, args.param, DEFAULT_METRICS, args.params_file, args.profile)
    write_metrics(Path("metrics") / args.profile / f"sweep_{args.param}.json", {"param": args.param, "points": points})
    if points:
        plot_sweep(points, args.param, list(DEFAULT_METRICS), Path("reports") / args.profile / f"sweep_{args.param}.png")
    print(json.dumps(points, indent=1))
    return 0 if points else 1


if __name__ == "__main__":
    sys.exit(main())
