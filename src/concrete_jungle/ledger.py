"""The pending-re-run ledger: pipelines whose committed lock lags the code, openly and with a reason (issue 27).

A change to shared code stales many pipelines at once (hours of re-runs on 2 cores), so a lock may lag the code,
but only openly: ``pipelines/pending.yaml`` names each such pipeline with why it is stale (one line) and the commit
its committed results come from (the last commit at which its lock was fresh)::

    real:
      results_at: 2c978be0a1...      # full or abbreviated commit; its lock file is the one committed now
      why: training precision auto and the machine record (issue 27) changed training code and params

:func:`ledger_problems` holds the ledger to the pipelines' real state (``python -m concrete_jungle.lineage check``):
a stale pipeline missing from the ledger fails (b), an entry for a fresh or never-run pipeline fails (c), and the
world pipeline (a bare ``dvc repro``) is never pending (d): a change that stales it re-runs it in the same landing.
An entry excuses changed code, data, params and upstream results only: a pending pipeline whose committed results
(metrics, reports) differ from its lock still fails, and so does a ``results_at`` outside HEAD's history, equal to
HEAD once the ledger is committed, or whose lock differs from the committed one.
:func:`provenance` / :func:`render_index` / :func:`fill_blocks` say, wherever results are read (the README,
``reports/README.md``), which results are pending and since which commit, and which fresh results were gathered
from pending ones; they read only the ledger, which locks exist and the dvc.yaml deps, so declaring a pipeline
pending stales no stage. :func:`estimate` and :func:`plan` serve ``lineage status [--plan MINUTES]``.
This module imports no torch and no DVC.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["LEDGER", "WORLD", "CHANGED_RESULTS", "Entry", "pipeline_name", "read_ledger", "ledger_problems", "estimate", "plan",
           "provenance", "render_index", "fill_blocks"]

#: the ledger file, relative to the repository root
LEDGER = "pipelines/pending.yaml"
#: the default pipeline (a bare ``dvc repro``): never pending
WORLD = "world"
_HEX = re.compile(r"^[0-9a-fA-F]{7,40}$")
#: the kind of problem ``lineage`` reports when committed results (metrics/, reports/) differ from their lock
CHANGED_RESULTS = "changed committed results"


@dataclass(frozen=True)
class Entry:
    """One pending pipeline: ``results_at`` (a commit, 7-40 hex digits) and ``why`` (one line)."""

    results_at: str
    why: str

    @property
    def short(self) -> str:
        return self.results_at[:7]


def pipeline_name(dvc_yaml: str) -> str:
    """``dvc.yaml`` -> ``world``; ``pipelines/<name>/dvc.yaml`` -> ``<name>``."""
    return WORLD if dvc_yaml == "dvc.yaml" else Path(dvc_yaml).parent.name


def read_ledger(repo: Path) -> tuple[dict[str, Entry], list[str]]:
    """The ledger of the checkout ``repo`` (``{}`` when the file is absent) and the problems of its form: not a
    mapping, an entry without ``results_at`` / ``why``, a commit that is not 7-40 hex digits, a multi-line or
    empty ``why``, unknown keys. A malformed entry is left out of the returned ledger."""
    path = repo / LEDGER
    if not path.is_file():
        return {}, []
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys) or {}
    except UnicodeDecodeError as err:
        return {}, [f"{LEDGER}: not UTF-8 ({err})"]
    except yaml.YAMLError as err:
        return {}, [f"{LEDGER}: not valid YAML ({err})"]
    if not isinstance(data, dict):
        return {}, [f"{LEDGER}: must map pipeline names to {{results_at, why}}, got {type(data).__name__}"]
    ledger, problems = {}, []
    for name, entry in data.items():
        where = f"{LEDGER}: {name}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a mapping with results_at and why")
            continue
        extra = set(entry) - {"results_at", "why"}
        commit, why = entry.get("results_at"), entry.get("why")
        if extra:
            problems.append(f"{where}: unknown keys {sorted(map(str, extra))} (only results_at and why)")
        elif not isinstance(commit, str) or not _HEX.match(commit):  # an all-digit hash must be quoted in YAML
            problems.append(f"{where}: results_at must be a commit written as a string (7-40 hex digits, quoted "
                            f"when all digits), got {commit!r}")
        elif not isinstance(why, str) or not why.strip() or "\n" in why.strip():
            problems.append(f"{where}: why must be one non-empty line")
        else:
            ledger[str(name)] = Entry(commit.lower(), why.strip())
    return ledger, problems


class _UniqueKeys(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice (a pipeline listed twice would keep only its last entry)."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def _results_at_problem(repo: Path, name: str, entry: Entry, lock_rel: str) -> str | None:
    """A problem when ``entry.results_at`` is not a commit of the repository, or the lock committed now differs
    from the lock at that commit (the results are then not that commit's). Not checked (None) outside a git
    history: a copy without commits, or a shallow clone that lacks the commit."""
    if _git(repo, "rev-parse", "--verify", "--quiet", "HEAD").returncode != 0:
        return None
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{entry.results_at}^{{commit}}")
    if found.returncode != 0:
        if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
            return None
        return f"{LEDGER}: {name}: results_at {entry.results_at} is not a commit of this repository"
    commit = found.stdout.strip()
    if _git(repo, "merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
        return f"{LEDGER}: {name}: results_at {entry.short} is not in the history of HEAD"
    head = _git(repo, "rev-parse", "HEAD").stdout.strip()
    ledger_committed = _git(repo, "diff", "--quiet", "HEAD", "--", LEDGER).returncode == 0
    if commit == head and ledger_committed:
        return (f"{LEDGER}: {name}: results_at is HEAD itself, the commit whose code stales it: name the commit "
                "at which its lock was last fresh")
    then = _git(repo, "show", f"{commit}:{lock_rel}")
    if then.returncode != 0:
        return f"{LEDGER}: {name}: {lock_rel} does not exist at results_at {entry.short}"
    if then.stdout != (repo / lock_rel).read_text():
        return (f"{LEDGER}: {name}: {lock_rel} changed since results_at {entry.short}: set results_at to the commit "
                "of its last re-run")
    return None


def ledger_problems(repo: Path, stale: dict[str, list[str]], locked: set[str], names: list[str],
                    ledger: dict[str, Entry]) -> list[str]:
    """The ledger held to the pipelines' state.

    Args:
        repo: the checkout (for the results_at check against git).
        stale: ``{pipeline name: its stale problems}`` for every locked pipeline that is stale (from ``lineage``).
        locked: names of the pipelines that have a committed lock.
        names: every pipeline's name.
        ledger: :func:`read_ledger`'s entries.

    Returns:
        One line per problem: (b) a stale pipeline not in the ledger (its problems follow), (c) an entry for a fresh
        or never-run pipeline or an unknown name, (d) the world stale or in the ledger; a pending pipeline whose
        committed results (metrics, reports) differ from its lock; a results_at that is not in the history of HEAD,
        is HEAD itself once the ledger is committed, or whose lock differs from the lock committed now.
    """
    problems = []
    for name, why in stale.items():
        if name == WORLD:
            problems.append(f"{WORLD} pipeline is stale and is never pending: re-run it (dvc repro) in this change")
            problems += [f"  {p}" for p in why]
        elif name not in ledger:
            problems.append(f"{name} pipeline is stale and not in {LEDGER}: re-run it (dvc repro "
                            f"{_dvc_yaml(name)}) or declare it pending (results_at, why)")
            problems += [f"  {p}" for p in why]
        elif changed := [p for p in why if f": {CHANGED_RESULTS} " in p]:
            problems.append(f"{name} pipeline is pending, but its committed results differ from its lock (a pending "
                            f"pipeline's results are those of results_at): restore them or re-run it")
            problems += [f"  {p}" for p in changed]
    for name, entry in ledger.items():
        if name == WORLD:
            problems.append(f"{LEDGER}: {WORLD} is never pending (a fresh clone's dvc repro must be a no-op)")
        elif name not in names:
            problems.append(f"{LEDGER}: {name} is not a pipeline (known: {', '.join(names)})")
        elif name not in locked:
            problems.append(f"{LEDGER}: {name} has never run (no lock): nothing is pending")
        elif name not in stale:
            problems.append(f"{LEDGER}: {name} is fresh: remove its entry")
        else:
            problems += filter(None, [_results_at_problem(repo, name, entry, _lock(name))])
    return problems


def _dvc_yaml(name: str) -> str:
    return "dvc.yaml" if name == WORLD else f"pipelines/{name}/dvc.yaml"


def _lock(name: str) -> str:
    return str(Path(_dvc_yaml(name)).with_suffix(".lock"))


# ------------------------------------------------------------------------------------------------ estimate
def estimate(repo: Path, name: str, source: str | None = None) -> dict[str, Any] | None:
    """The measured re-run time of pipeline ``name`` from ``benchmarks/results/dvc_repro_*.json`` (runs that exited 0):
    ``{"minutes", "from" (the JSON), "cpu" (its CPU model, or None where it was not recorded), "how"}``, or None.

    Looked up in order: ``dvc_repro_<name>.json`` (its ``wall_s``; not for ``controls``, whose run also re-ran the
    pipelines it gathers); the sum of the stage times of ``name`` in a JSON of a run that included it (the controls'
    gathering ran the world seeds); for a derived profile,
    ``source``'s estimate (``how`` says so)."""
    results = repo / "benchmarks" / "results"
    own = results / f"dvc_repro_{name}.json"
    data = _run_json(own)
    if data is not None and isinstance(data.get("wall_s"), (int, float)) and name != "controls":
        # (the controls' JSON timed the pipelines it gathers too)
        return {"minutes": data["wall_s"] / 60, "from": own.relative_to(repo).as_posix(), "cpu": _cpu(data),
                "how": "measured"}
    marker = "stages/controls.py" if name == "controls" else f"--params pipelines/{name}/params.yaml"
    for other in sorted(results.glob("dvc_repro_*.json")):
        data = _run_json(other)
        if data is None:
            continue
        secs = [s for cmd, s in (data.get("stage_wall_s") or {}).items() if isinstance(s, (int, float))
                and (cmd.startswith(marker) if name == "controls"
                     else cmd.endswith(marker) and not cmd.startswith("stages/controls.py"))]
        if secs:
            return {"minutes": sum(secs) / 60, "from": other.relative_to(repo).as_posix(), "cpu": _cpu(data),
                    "how": "sum of its stages in a larger run"}
    if source is not None and source != name:
        found = estimate(repo, source)
        if found is not None:
            return {**found, "how": f"as {source} (derived from it; not measured itself)"}
    return None


def _run_json(path: Path) -> dict | None:
    """A benchmark JSON of a run that succeeded (``exit_code`` 0 or absent), else None (absent, unreadable, failed)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("exit_code", 0) == 0 else None


def _cpu(data: dict) -> str | None:
    info = data.get("machine_info") or {}
    if not info.get("cpu_model"):
        return None
    return f"{info['cpu_model']} [{' '.join(info.get('isa_flags') or [])}]"


def plan(pending: list[str], minutes: float, upstream: dict[str, set[str]],
         minutes_of: dict[str, float | None]) -> tuple[list[str], list[str]]:
    """Which of the ``pending`` pipelines to re-run within ``minutes``, in dependency order: a pipeline comes after
    the pipelines it gathers (``upstream``: name -> names whose outputs it reads) and is taken only when every
    pending upstream one is taken; among ready ones the shortest first. A pipeline without an estimate is never
    taken. Returns ``(taken in order, left)``."""
    todo, taken, left, used = set(pending), [], [], 0.0
    while todo:
        ready = sorted((n for n in todo if not (upstream.get(n, set()) & todo)),
                       key=lambda n: (minutes_of.get(n) is None, minutes_of.get(n) or 0.0, n))
        if not ready:  # a cycle cannot happen between DVC pipelines; stop rather than loop
            break
        name = ready[0]
        todo.discard(name)
        cost = minutes_of.get(name)
        blocked = upstream.get(name, set()) & set(left)
        if cost is not None and not blocked and used + cost <= minutes:
            taken.append(name)
            used += cost
        else:
            left.append(name)
    return taken, left + sorted(todo)


# ---------------------------------------------------------------------------------------------- provenance
def provenance(name: str, ledger: dict[str, Entry], locked: set[str],
               upstream: dict[str, set[str]] | None = None) -> str:
    """One line on where pipeline ``name``'s committed results come from; a fresh pipeline that gathers pending
    ones (``upstream``: name -> the pipelines whose outputs it reads) says so."""
    if name in ledger:
        e = ledger[name]
        return f"results at `{e.short}`, pending re-run: {e.why}"
    if name not in locked:
        return "never run here (no lock, no results)"
    reads = sorted((upstream or {}).get(name, set()) & set(ledger))
    if reads:
        return (f"fresh: made by this commit's code from the committed results of pending {', '.join(reads)} "
                "(see their lines)")
    return "fresh: made by this commit's code, data and params"


_INDEX_HEAD = """<!-- GENERATED by `python -m concrete_jungle.lineage write` from {ledger} and the locks: do not edit. -->
# Results and their provenance

Every pipeline's results (`metrics/<name>/`, `reports/<name>/`) and where they come from. A **pending** pipeline's
lock lags the code openly: its results are those of the commit named, and its re-run waits in `{ledger}`
(`python -m concrete_jungle.lineage status --plan MINUTES`). Fresh ones were made by this commit's code.

| pipeline | results | provenance |
|---|---|---|
"""


def render_index(names: list[str], ledger: dict[str, Entry], locked: set[str], repo: Path,
                 upstream: dict[str, set[str]] | None = None) -> str:
    """The text of ``reports/README.md``: a row per pipeline with its reports / metrics folders and
    :func:`provenance`."""
    rows = []
    for name in names:
        folders = [f"`{d}/{name}/`" for d in ("reports", "metrics") if (repo / d / name).is_dir()]
        rows.append(f"| {name} | {', '.join(folders) or '—'} | {provenance(name, ledger, locked, upstream)} |")
    return _INDEX_HEAD.format(ledger=LEDGER) + "\n".join(rows) + "\n"


_OPEN, _CLOSE = "<!-- provenance: ", "<!-- /provenance -->"
_MARKER = re.compile(r"^\s*<!--\s*/?\s*provenance\b", re.I)


def fill_blocks(text: str, ledger: dict[str, Entry], locked: set[str], names: list[str],
                upstream: dict[str, set[str]] | None = None, controls: dict[str, str] | None = None) -> str:
    """``text`` (a Markdown file such as the README) with every block from a line ``<!-- provenance: a b -->`` to
    the next line ``<!-- /provenance -->`` filled with the :func:`provenance` of each named pipeline (one line for
    the pipelines that share it) and, for the pipelines in ``controls`` (name -> one line), the state of their
    positive control, so that no result is quoted without it. Every locked pipeline must be named by some block, so
    that no pipeline's results are quoted without their provenance.

    Raises:
        ValueError: a block names an unknown pipeline; an opening line without its closing line (or a closing line
            without an opening), or a provenance marker not written exactly so (named by line number); a locked
            pipeline named by no block.
    """
    lines = text.split("\n")
    out, named, i = [], set(), 0
    while i < len(lines):
        line = lines[i]
        if not _MARKER.match(line):
            out.append(line)
            i += 1
            continue
        if not (line.startswith(_OPEN) and line.endswith(" -->")) or line.startswith(_CLOSE):
            raise ValueError(f"line {i + 1}: {line.strip()!r} is not an opening '{_OPEN}<names> -->' line, or stands "
                             f"without one")
        block = line[len(_OPEN):-len(" -->")].split()
        if unknown := [n for n in block if n not in names]:
            raise ValueError(f"line {i + 1}: provenance block names unknown pipeline(s) {unknown} (known: "
                             f"{', '.join(names)})")
        end = next((j for j in range(i + 1, len(lines)) if _MARKER.match(lines[j])), None)
        if end is None or lines[end] != _CLOSE:
            raise ValueError(f"line {i + 1}: provenance block {block} has no '{_CLOSE}' line before the next marker")
        said: dict[str, list[str]] = {}  # pipelines with the same provenance share a line
        for name in block:
            said.setdefault(provenance(name, ledger, locked, upstream), []).append(f"**{name}**")
        shared: dict[str, list[str]] = {}
        for name in block:
            if name in (controls or {}):
                shared.setdefault(controls[name], []).append(f"**{name}**")
        checks = [f"> *Positive control* — {', '.join(who)}: {text_}.  " for text_, who in shared.items()]
        out += [line, *(f"> *Provenance* — {', '.join(who)}: {text_}.  " for text_, who in said.items()), *checks,
                _CLOSE]
        named |= set(block)
        i = end + 1
    if missing := sorted(locked - named):
        raise ValueError(f"no provenance block names the locked pipeline(s) {missing}: add them where their "
                         "results are quoted")
    return "\n".join(out)
