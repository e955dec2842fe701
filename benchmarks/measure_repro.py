"""Wall time and peak memory of a whole `dvc repro` (README figures).

Runs the given command (default ``dvc repro``) and samples, every 0.25 s (PSS every 2 s), the resident memory of its whole process
tree (DVC plus the stage it is running) as RSS and as PSS (proportional set size: a page shared by several processes,
e.g. forked DataLoader workers, counted once; the sum of RSS counts it in every process): the peak PSS sum is what
the machine must hold. Also records the
largest single process, and the wall time of each stage (every ``python stages/...`` command seen in the tree, from
first to last sample), so the slowest stage is visible. Writes ``benchmarks/results/<name>.json``.

    python benchmarks/measure_repro.py --name dvc_repro_world -- dvc repro -f
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import psutil

from concrete_jungle.machine import machine_info


def _tree_rss(proc: psutil.Process, stages: dict[str, list[float]], with_pss: bool) -> tuple[int, int, str, int]:
    """Summed and largest resident memory of the tree (bytes), and the summed proportional set size (PSS: pages
    shared between processes, e.g. forked DataLoader workers, counted once in all); updates ``stages`` (stage
    command -> [first seen, last seen] in seconds since the epoch). PSS (reading /proc/<pid>/smaps costs CPU) only
    when ``with_pss``."""
    total = peak = pss = 0
    who = ""
    now = time.time()
    for p in [proc, *proc.children(recursive=True)]:
        try:
            rss = p.memory_info().rss
            cmd = " ".join(p.cmdline())
            pss += getattr(p.memory_full_info(), "pss", rss) if with_pss else 0
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if rss > peak:
            peak, who = rss, cmd
        if "stages/" in cmd and "python" in cmd:
            key = cmd[cmd.index("stages/"):]
            stages.setdefault(key, [now, now])[1] = now
        total += rss
    return total, peak, who, pss


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="result name: benchmarks/results/<name>.json")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="command after --, default: dvc repro")
    args = parser.parse_args(argv)
    cmd = [c for c in args.cmd if c != "--"] or ["dvc", "repro"]
    t0 = time.time()
    child = subprocess.Popen(cmd)
    proc = psutil.Process(child.pid)
    peak_total = peak_single = peak_pss = 0
    peak_who = ""
    stages: dict[str, list[float]] = {}
    tick = 0
    while child.poll() is None:
        total, single, who, pss = _tree_rss(proc, stages, with_pss=tick % 8 == 0)  # PSS every 2 s
        tick += 1
        peak_total, peak_pss = max(peak_total, total), max(peak_pss, pss)
        if single > peak_single:
            peak_single, peak_who = single, who
        time.sleep(0.25)
    wall = time.time() - t0
    result = {
        "command": " ".join(cmd),
        "exit_code": child.returncode,
        "wall_s": round(wall, 1),
        "peak_tree_rss_gib": round(peak_total / 2**30, 2),
        "peak_tree_pss_gib": round(peak_pss / 2**30, 2),
        "peak_single_process_rss_gib": round(peak_single / 2**30, 2),
        "peak_single_process": peak_who,
        "stage_wall_s": {k: round(b - a, 1) for k, (a, b) in sorted(stages.items(), key=lambda kv: kv[1][0])},
        "slowest_stage": max(stages, key=lambda k: stages[k][1] - stages[k][0]) if stages else None,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        # CPU model, ISA flags and caps, torch threads: timings mean nothing without them (concrete_jungle.machine);
        # the precision each training stage resolved is in metrics/<p>/train/*.json
        "machine_info": machine_info(),
    }
    out = Path(__file__).parent / "results" / f"{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    sys.exit(main()["exit_code"])
