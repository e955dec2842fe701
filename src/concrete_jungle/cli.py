"""What every ``stages/<name>.py`` shares: argument parsing, typed params at start-up, and output hygiene.

A stage is ``python stages/<name>.py [--params FILE] [--<arg> VALUE ...]``: :func:`run_stage` parses the command
line, validates the profile's params file into :class:`~concrete_jungle.params.Params` before any work (a bad value
fails naming its key), calls the stage function and prints its result as JSON. Paths are relative to the
repository root, where DVC runs every stage.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

__all__ = ["run_stage", "fresh_dir", "clear_outputs", "output_transaction", "pop_live_summary", "dump_json", "is_main_rank"]

#: The outputs the running stage has set aside (``[(path, backup or None)]``), or None outside a stage.
_SET_ASIDE: list[tuple[Path, Path | None]] | None = None


def fresh_dir(path: str | os.PathLike) -> Path:
    """Clear ``path`` (:func:`clear_outputs`: set aside inside a stage) and create it empty (a stage's output
    folder); returns it as a Path."""
    path = Path(path)
    clear_outputs(path)
    path.mkdir(parents=True)
    return path


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()


def is_main_rank() -> bool:
    """Whether this process is rank 0 (torchrun sets ``RANK``; a plain run is rank 0): the one that owns outputs,
    locks and curves."""
    return int(os.environ.get("RANK", "0") or 0) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _restore_killed(p: Path) -> None:
    """Put back what a killed run set aside (``.<name>.previous-<pid>`` of a pid no longer alive): its outputs
    are partial, the set-aside ones whole.

    Raises:
        RuntimeError: a live process other than this one has set ``p`` aside (another run of the same stage)."""
    for b in sorted(p.parent.glob(f".{p.name}.previous-*")):
        pid = b.name.rsplit("-", 1)[1]
        if not pid.isdigit():
            continue
        if int(pid) != os.getpid() and _alive(int(pid)):
            raise RuntimeError(f"another run (pid {pid}) is writing {p}: wait for it to end, or stop it")
        _remove(p)
        os.replace(b, p)


def clear_outputs(*paths: str | os.PathLike) -> None:
    """Clear a stage's outputs before it writes any of them (missing ones are fine).

    Inside :func:`output_transaction` (every stage run through :func:`run_stage`) each existing output is set aside
    (renamed to a hidden ``.<name>.previous-<pid>`` beside it) and restored if the stage fails, so a stage with
    several outputs leaves all new outputs or all old ones (issue 22), never one new beside another from an earlier
    run. Outside a transaction the outputs are deleted (DVC does the same before ``dvc repro`` runs a stage). What a
    killed run set aside is put back first, so the old outputs survive a kill -9 too. Under ``torchrun`` only rank 0
    touches the outputs. Set-aside outputs hold their disk space until the stage ends.

    Raises:
        RuntimeError: another live run has set one of ``paths`` aside (naming it and its pid)."""
    if not is_main_rank():
        return
    for p in (Path(os.path.abspath(x)) for x in paths):
        if _SET_ASIDE is not None and any(p == q for q, _ in _SET_ASIDE):
            _remove(p)  # cleared again by the same stage: its first clearing set the old one aside
            continue
        _restore_killed(p)
        if _SET_ASIDE is None:
            _remove(p)
        elif p.exists() or p.is_symlink():
            b = p.with_name(f".{p.name}.previous-{os.getpid()}")  # a sibling: the same file system, so a rename
            os.replace(p, b)
            _SET_ASIDE.append((p, b))
        else:
            _SET_ASIDE.append((p, None))  # nothing old: a failure removes what was written


@contextlib.contextmanager
def output_transaction():
    """All-new or all-old outputs for the stage run inside (issue 22 item 1): the outputs :func:`clear_outputs`
    sets aside are deleted when the block ends normally (or by ``sys.exit(0)``), and put back (the new, partial
    ones removed) when it raises, the exception propagating; an output that cannot be put back is named in a note
    on that exception, and its set-aside copy left for the next run to restore. Nested transactions join the
    outermost one."""
    global _SET_ASIDE
    if _SET_ASIDE is not None:
        yield
        return
    _SET_ASIDE = []
    try:
        yield
    except SystemExit as err:
        if err.code not in (None, 0):
            _put_back(err)
            raise
        _drop_set_aside()
        raise
    except BaseException as err:
        _put_back(err)
        raise
    else:
        _drop_set_aside()
    finally:
        _SET_ASIDE = None


def _put_back(err: BaseException) -> None:
    for path, backup in reversed(_SET_ASIDE):
        try:
            _remove(path)
            if backup is not None:
                os.replace(backup, path)
        except OSError as e:  # the rest are still put back; the next run restores this one (_restore_killed)
            err.add_note(f"could not put back the earlier output {path} ({e}); it is kept as {backup}")


def _drop_set_aside() -> None:
    for _, backup in _SET_ASIDE:
        if backup is not None:
            _remove(backup)


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
    and validate params, call ``fn(params, **parsed)`` inside :func:`output_transaction` and print its result as
    JSON. ``fn`` may be a mapping
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
    with output_transaction():  # a failure leaves the stage's earlier outputs as they were
        result = func(params, **args)
    print(dump_json(result))
    return result
