"""Cross-machine check: does a re-run of a profile reproduce its committed metrics within tolerance?

Data stages (scenes, keywords, ConcretePlant, the benchmark's preparation) are byte-identical across machines, so
their metrics must not move at all; training and everything downstream of it (bf16 / fp32 kernels, thread order) is
reproduced only within a tolerance. The tolerance of each metric is derived from the **seed spread**: ``k`` times the
sample standard deviation of the same metric (same file under ``metrics/<profile>/``, same key) over the profile and
its seed profiles (``world``, ``world_seed1``, ``world_seed2``), never below ``floor``; a metric that no seed
profile holds has no spread and is listed, not judged. A seed re-draws everything
(scenes, base model, ConcretePlant sampling, fine-tunes), so this tolerance is looser than a same-seed re-run needs:
a metric outside it has moved more than a different seed would move it.

The comparison itself is ``dvc metrics diff <rev> --json`` (committed metrics at ``rev`` against the working tree's,
e.g. after ``dvc repro`` on another machine)::

    dvc repro                                    # on the other machine
    python -m analysis.cross_machine --rev HEAD  # exit 1 when a metric moved beyond its tolerance

Keys of wall time, throughput and the machine record are not compared (they are expected to differ).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["EXACT_FILES", "IGNORED_KEYS", "metrics_diff", "lookup", "cross_machine_check", "main"]

#: Metric files of data stages, relative to ``metrics/<profile>/``: byte-identical across machines (tolerance 0).
EXACT_FILES = ("corpus.json", "keywords.json", "benchmark.json", "concreteplant/")
#: Key parts that are expected to differ between machines (not compared).
IGNORED_KEYS = ("wall_s", "samples_per_s", "machine", "resumed_from_step", "cache_s", "s_per_step")


def metrics_diff(rev: str, repo: str | Path = ".") -> dict:
    """``dvc metrics diff <rev> --json`` in ``repo``: ``{file: {key: {"old", "new", "diff"}}}`` (only the metrics
    that changed).

    Raises:
        RuntimeError: dvc failed (its stderr in the message).
    """
    res = subprocess.run(["dvc", "metrics", "diff", rev, "--json"], cwd=repo, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"dvc metrics diff {rev} failed in {repo}: {res.stderr.strip()}")
    return json.loads(res.stdout or "{}")


def lookup(data, key: str):
    """The value at dotted ``key`` in a JSON document (keys may themselves hold dots, e.g. ``R@1`` does not, but
    ``metrics.world.i2t.R@1`` walks ``metrics`` -> ``world`` -> ...; a key with a dot is matched greedily), or None."""
    if not key:
        return data
    if not isinstance(data, Mapping):
        return None
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in data:
            found = lookup(data[head], ".".join(parts[i:]))
            if found is not None:
                return found
    return None


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def cross_machine_check(diff: Mapping, profile: str, seeds: Sequence[str], root: str | Path = ".", *,
                        k: float = 3.0, floor: float = 0.005) -> dict:
    """Judge the changed metrics of ``profile`` in ``diff`` (as :func:`metrics_diff`).

    Args:
        diff: ``{file: {key: {"old", "new", "diff"}}}``; files outside ``metrics/<profile>/`` are ignored.
        profile: the profile re-run (its metrics folder name, e.g. ``world``).
        seeds: its seed profiles (``world_seed1``, ...), read from ``<root>/metrics/<seed>/`` for the spread.
        root: the repository root.
        k: tolerance = ``k`` x the sample standard deviation over the profile's committed value and its seeds'.
        floor: the smallest tolerance (metric units: accuracies are fractions, losses in their own units).

    Returns:
        ``{"profile", "k", "floor", "compared", "outside": [row], "within": int, "exact_moved": [row],
        "unjudged": [row], "keys_differ": [row], "ignored": int, "passed"}``; each row ``{"file", "key", "old",
        "new", "diff", "tolerance", "spread_n"}``, ``spread_n`` the number of values the spread came from.
        ``outside``: numbers beyond their tolerance and text values (verdicts) that changed; ``unjudged``: numbers
        without a seed value (no spread); ``keys_differ``: a key present on one side only (the re-run's code is not
        the reference's: compare against the commit whose code you re-ran). ``passed`` is True when ``outside``,
        ``exact_moved`` and ``keys_differ`` are empty.

    Raises:
        ValueError: ``k`` or ``floor`` negative or not finite.
    """
    if not (math.isfinite(k) and math.isfinite(floor)) or k < 0 or floor < 0:
        raise ValueError(f"cross_machine_check: k and floor must be finite and >= 0, got k={k}, floor={floor}")
    root = Path(root)
    prefix = f"metrics/{profile}/"
    out = {"profile": profile, "k": k, "floor": floor, "compared": 0, "outside": [], "within": 0,
           "exact_moved": [], "unjudged": [], "keys_differ": [], "ignored": 0}
    docs: dict[Path, object] = {}

    def doc(path: Path):
        if path not in docs:
            docs[path] = json.loads(path.read_text()) if path.is_file() else None
        return docs[path]

    for file, keys in sorted(diff.items()):
        if not file.startswith(prefix):
            continue
        rel = file[len(prefix):]
        exact = any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in EXACT_FILES)
        for key, change in sorted((keys or {}).items()):
            if any(part in key for part in IGNORED_KEYS):
                out["ignored"] += 1
                continue
            old, new = _number(change.get("old")), _number(change.get("new"))
            row = {"file": file, "key": key, "old": change.get("old"), "new": change.get("new")}
            if exact:
                out["exact_moved"].append({**row, "diff": change.get("diff"), "tolerance": 0.0, "spread_n": 0})
                continue
            if change.get("old") is None or change.get("new") is None:
                out["keys_differ"].append({**row, "diff": None, "tolerance": None, "spread_n": 0})
                continue
            out["compared"] += 1
            if old is None or new is None:  # a text value (a verdict) that changed: no tolerance applies
                out["outside"].append({**row, "diff": None, "tolerance": None, "spread_n": 0})
                continue
            values = [old] + [v for v in (_number(lookup(doc(root / "metrics" / s / rel), key)) for s in seeds)
                              if v is not None]
            if len(values) < 2:
                out["unjudged"].append({**row, "diff": new - old, "tolerance": None, "spread_n": len(values)})
                continue
            tol = max(floor, k * statistics.stdev(values))
            if abs(new - old) > tol:
                out["outside"].append({**row, "diff": new - old, "tolerance": tol, "spread_n": len(values)})
            else:
                out["within"] += 1
    out["passed"] = not out["outside"] and not out["exact_moved"] and not out["keys_differ"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", default="HEAD", help="the commit whose metrics are the reference (default HEAD)")
    ap.add_argument("--profile", default="world")
    ap.add_argument("--seeds", nargs="*", default=None,
                    help="seed profiles for the spread (default <profile>_seed1 <profile>_seed2)")
    ap.add_argument("--k", type=float, default=3.0)
    ap.add_argument("--floor", type=float, default=0.005)
    ap.add_argument("--diff-json", help="read the diff from this file instead of running dvc metrics diff")
    ap.add_argument("--show", type=int, default=15, help="rows of the worst offenders to print")
    args = ap.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else [f"{args.profile}_seed1", f"{args.profile}_seed2"]
    diff = json.loads(Path(args.diff_json).read_text()) if args.diff_json else metrics_diff(args.rev)
    res = cross_machine_check(diff, args.profile, seeds, k=args.k, floor=args.floor)
    print(f"cross-machine check of {args.profile} against {args.rev}: {res['compared']} changed metrics compared, "
          f"{res['within']} within k = {args.k:g} x the seed spread (floor {args.floor:g}), "
          f"{len(res['outside'])} outside, {len(res['unjudged'])} without a seed spread (not judged); "
          f"{len(res['exact_moved'])} data-stage metrics moved (must be 0); {len(res['keys_differ'])} keys on one "
          f"side only (must be 0: compare against the commit whose code was re-run); {res['ignored']} timing / "
          f"machine keys ignored")
    for row in res["keys_differ"][:args.show]:
        print(f"  KEY ON ONE SIDE {row['file']} {row['key']}: {row['old']} -> {row['new']}")
    for row in res["exact_moved"][:args.show]:
        print(f"  DATA MOVED {row['file']} {row['key']}: {row['old']} -> {row['new']}")
    worst = sorted(res["outside"], key=lambda r: -(math.inf if r["diff"] is None else abs(r["diff"]) / r["tolerance"]))
    for row in worst[:args.show]:
        print(f"  OUTSIDE {row['file']} {row['key']}: {row['old']} -> {row['new']} (tolerance {row['tolerance']})")
    return 0 if res["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
