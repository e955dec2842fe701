"""Two profiles that should agree within tolerance, compared on the same items (issue 21 item 3: the world trained
from WebDataset shards, ``world_wds``, against the world trained from JSONL).

What "within tolerance" means here (stated before the comparison was run): the base model (trained before any stage
the format touches, on the same corpus; its verdicts on the same benchmark items) gives the same verdicts, and each
fine-tune -- the same steps and seed, its samples in another order -- differs from its
counterpart on no suite by more than chance: no paired McNemar p below 0.05 after Holm's correction over every
(model, suite) pair. The largest accuracy difference and each pair's 95 % paired-bootstrap CI are reported too.

    python analysis/compare_profiles.py --a world --b world_wds --out benchmarks/results/world_wds_vs_world.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from concrete_jungle.evaluation.paired import holm, paired_bootstrap_ci, paired_comparison

REPO = Path(__file__).resolve().parents[1]
SUITES = ("sugarcrepe", "heldout", "winoground")  # {subset: {item: bool}} verdicts


def compare(a: str, b: str, seed: int = 0, root: Path = REPO) -> dict:
    """The comparison of the module docstring (``b`` against ``a``, differences in points), as a finite dict.

    Raises:
        ValueError: the two profiles share no verdicts.
    """
    rows = []
    for suite in SUITES:
        da, db = root / "data" / a / "verdicts" / suite, root / "data" / b / "verdicts" / suite
        for fa in sorted(da.glob("*.json")):
            fb = db / fa.name
            if not fb.exists():
                continue
            ja, jb = json.loads(fa.read_text()), json.loads(fb.read_text())
            if "verdicts" not in ja or "verdicts" not in jb:  # an index, not a model's verdicts
                continue
            va, vb = ja["verdicts"], jb["verdicts"]
            groups = ({"all": (va, vb)} if suite == "sugarcrepe" else
                      {d: ({d: va[d]}, {d: vb[d]}) for d in va if d in vb})
            for group, (ga, gb) in groups.items():
                cmp = paired_comparison(gb, ga)  # b over a
                ci = paired_bootstrap_ci(gb, ga, seed=seed)
                rows.append({"model": fa.stem, "suite": suite, "group": group, "n": cmp["n"],
                             "accuracy_a": round(cmp["accuracy_b"] * 100, 2),
                             "accuracy_b": round(cmp["accuracy_a"] * 100, 2),
                             "delta_points": round(cmp["delta"] * 100, 2),
                             "ci95_points": [round(ci["low"] * 100, 2), round(ci["high"] * 100, 2)],
                             "only_a": cmp["only_b"], "only_b": cmp["only_a"], "mcnemar_p": cmp["mcnemar_p"]})
    fine = [r for r in rows if r["model"] != "base"]
    for r, p in zip(fine, holm([r["mcnemar_p"] for r in fine])):
        r["holm_p"] = p
    base = [r for r in rows if r["model"] == "base"]
    base_equal = bool(base) and all(r["only_a"] == r["only_b"] == 0 for r in base)
    within = all(r["holm_p"] >= 0.05 for r in fine)
    if not rows:
        raise ValueError(f"compare_profiles: no verdicts of {a} and {b} on the same suites (data/<p>/verdicts)")
    return {"a": a, "b": b, "base_verdicts_identical": base_equal,
            "fine_tunes_within_tolerance": within,
            "max_abs_delta_points": max((abs(r["delta_points"]) for r in fine), default=0.0),
            "min_holm_p": min((r["holm_p"] for r in fine), default=1.0),
            "criterion": "base verdicts equal; no fine-tune x suite paired McNemar p < 0.05 after Holm",
            "comparisons": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", default="world")
    ap.add_argument("--b", default="world_wds")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    result = compare(args.a, args.b)
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(json.dumps({k: v for k, v in result.items() if k != "comparisons"}, indent=2))
    for r in result["comparisons"]:
        print(f"{r['model']:12s} {r['suite']:10s} {r['group']:4s} n={r['n']:5d} {r['accuracy_a']:6.2f} -> "
              f"{r['accuracy_b']:6.2f} ({r['delta_points']:+.2f}, CI {r['ci95_points']}, p {r['mcnemar_p']:.3g})")


if __name__ == "__main__":
    main()
