"""What every ``stages/<name>.py`` shares: argument parsing, typed params at start-up, and output hygiene.

A stage is ``python stages/<name>.py [--params FILE] [--<arg> VALUE ...]``: :func:`run_stage` parses the command
line, validates the profile's params file into :class:`~concrete_jungle.params.Params` before any work (a bad value
fails naming its key), calls the stage function and prints its result as JSON. Paths are relative to the
repository root, where DVC runs every stage.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

__all__ = ["run_stage", "fresh_dir", "clear_outputs", "pop_live_summary", "dump_json"]


def fresh_dir(path: str | os.PathLike) -> Path:
    """Remove ``path`` if it exists and create it empty (a stage's output folder); returns it as a Path."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def clear_outputs(*paths: str | os.PathLike) -> None:
    """Delete a stage's output files before it writes any of them (missing ones are fine).

    A stage with several outputs calls this first, so a failure part-way leaves some outputs new and the others
    absent, never one new beside another from an earlier run (DVC does the same before ``dvc repro`` runs a
    stage; this covers a stage run by hand)."""
    for p in map(Path, paths):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


def pop_live_summary(live_dir: str | os.PathLike) -> dict:
    """Read and remove the ``metrics.json`` dvclive wrote into a training run's folder, leaving only its step
    curves (``plots/metrics/...``, a DVC plots folder); the stage writes the summaries of a family into one
    metrics file (``metrics/<p>/train/<family>.json``) so metrics and plots never share a folder.

    Raises:
        FileNotFoundError: the run wrote no summary (names the file).
    """
    path = Path(live_dir) / "metrics.json"
    if not path.is_file():
        raise FileNotFoundError(f"dvclive summary not found: {path}")
    summary = json.loads(path.read_text())
    path.unlink()
    return summary


def dump_json(obj) -> str:
    """Pretty JSON for stage logs (non-JSON values as ``str``)."""
    return json.dumps(obj, indent=2, default=str)


def run_stage(description: str, fn, argv=None, **arguments) -> dict:
    """Thin CLI shared by ``stages/*.py``: parse ``--params`` plus ``arguments`` (name -> argparse kwargs), load
    and validate params, call ``fn(params, **parsed)`` and print its result as JSON. ``fn`` may be a mapping
    ``{step: function}`` (a suite's ``prepare`` and ``score``): the first positional argument picks the step.

    Raises:
        SystemExit: on bad command-line arguments (argparse).
        ParamsError: on invalid or missing params, naming the key.
        FileNotFoundError: if the params file does not exist.
    """
    import argparse

    from concrete_jungle.params import load_params

    parser = argparse.ArgumentParser(description=description)
    if isinstance(fn, dict):
        parser.add_argument("step", choices=sorted(fn), help="which step of the stage to run")
    parser.add_argument("--params", default="params.yaml", help="the profile's params file (default: params.yaml, "
                        "the embedded world; pipelines/<profile>/params.yaml for the others)")
    for name, kwargs in arguments.items():
        parser.add_argument(f"--{name}", **{"required": True, **kwargs})  # required unless kwargs say otherwise
    args = vars(parser.parse_args(argv))
    params = load_params(args.pop("params"))
    func = fn[args.pop("step")] if isinstance(fn, dict) else fn
    result = func(params, **args)
    print(dump_json(result))
    return result
