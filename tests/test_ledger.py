"""The pending-re-run ledger (issue 27): the rules of ``lineage check`` over it, its form, the provenance written from
it, re-run estimates and the plan. The rules are tested here on hand-made states; ``test_lineage.py`` runs them on a
throwaway copy of the repository (slow)."""

import json
import subprocess
from pathlib import Path

import pytest

from concrete_jungle import ledger
from concrete_jungle.ledger import Entry

NAMES = ["world", "real", "paper", "world_seed1", "controls"]
C = "2c978becb9033fbe79f22c8f0507284151589ad3"


def problems(tmp_path, stale, ledger_entries, locked=("world", "real", "world_seed1", "controls")):
    return ledger.ledger_problems(tmp_path, stale, set(locked), NAMES, ledger_entries)


def test_a_stale_pipeline_in_the_ledger_passes_and_one_missing_fails_by_name(tmp_path):
    stale = {"real": ["pipelines/real/dvc.yaml:train@hc-infonce: changed deps {...}"],
             "world_seed1": ["pipelines/world_seed1/dvc.yaml:base_model: changed params {...}"]}
    both = {"real": Entry(C, "x"), "world_seed1": Entry(C, "y")}
    assert problems(tmp_path, stale, both) == []
    (first, detail) = problems(tmp_path, stale, {"real": Entry(C, "x")})
    assert first.startswith("world_seed1 pipeline is stale and not in pipelines/pending.yaml")
    assert "dvc repro pipelines/world_seed1/dvc.yaml" in first and "base_model" in detail


def test_the_world_is_never_pending(tmp_path):
    stale = {"world": ["dvc.yaml:train@hc-infonce: changed deps {'src/concrete_jungle/training.py': 'modified'}"]}
    got = problems(tmp_path, stale, {"world": Entry(C, "too long to re-run")})
    assert got[0] == "world pipeline is stale and is never pending: re-run it (dvc repro) in this change"
    assert "training.py" in got[1]
    assert got[2] == "pipelines/pending.yaml: world is never pending (a fresh clone's dvc repro must be a no-op)"
    assert problems(tmp_path, {}, {"world": Entry(C, "x")}) == [got[2]]  # fresh world listed: still refused


def test_a_fresh_or_never_run_or_unknown_pipeline_left_in_the_ledger_fails(tmp_path):
    assert problems(tmp_path, {}, {"real": Entry(C, "x")}) == [
        "pipelines/pending.yaml: real is fresh: remove its entry"]
    assert problems(tmp_path, {}, {"paper": Entry(C, "x")}) == [
        "pipelines/pending.yaml: paper has never run (no lock): nothing is pending"]
    (bad,) = problems(tmp_path, {}, {"reall": Entry(C, "x")})
    assert bad.startswith("pipelines/pending.yaml: reall is not a pipeline (known: world, real")


def test_read_ledger_refuses_malformed_entries_by_name(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / ledger.LEDGER).write_text(
        f"real:\n  results_at: {C}\n  why: precision auto\n"
        "world_seed1:\n  results_at: HEAD\n  why: x\n"
        f"controls:\n  results_at: {C[:7]}\n  why: ''\n"
        f"world_type:\n  results_at: {C}\n  why: x\n  by: me\n"
        "paper: pending\n")
    entries, probs = ledger.read_ledger(tmp_path)
    assert entries == {"real": Entry(C, "precision auto")}
    assert probs == [
        "pipelines/pending.yaml: world_seed1: results_at must be a commit written as a string (7-40 hex digits, "
        "quoted when all digits), got 'HEAD'",
        "pipelines/pending.yaml: controls: why must be one non-empty line",
        "pipelines/pending.yaml: world_type: unknown keys ['by'] (only results_at and why)",
        "pipelines/pending.yaml: paper: must be a mapping with results_at and why"]
    (tmp_path / ledger.LEDGER).write_text("real:\n  results_at: 0712345\n  why: x\n")  # YAML reads an octal int
    assert ledger.read_ledger(tmp_path)[1] == [
        "pipelines/pending.yaml: real: results_at must be a commit written as a string (7-40 hex digits, quoted when "
        "all digits), got 234725"]
    (tmp_path / ledger.LEDGER).write_text(f"real:\n  results_at: {C.upper()}\n  why: x\nreal:\n  results_at: {C}\n"
                                          "  why: y\n")
    (dup,) = ledger.read_ledger(tmp_path)[1]
    assert dup.startswith("pipelines/pending.yaml: not valid YAML") and "duplicate key 'real'" in dup
    (tmp_path / ledger.LEDGER).write_text(f"real:\n  results_at: {C.upper()}\n  why: x\n")
    assert ledger.read_ledger(tmp_path) == ({"real": Entry(C, "x")}, [])  # git accepts upper-case hex
    (tmp_path / ledger.LEDGER).write_bytes(f"real:\n  results_at: {C}\n  why: caf\xe9\n".encode("latin-1"))
    assert ledger.read_ledger(tmp_path)[1][0].startswith("pipelines/pending.yaml: not UTF-8")
    (tmp_path / ledger.LEDGER).write_text("- real\n")
    assert ledger.read_ledger(tmp_path) == ({}, [
        "pipelines/pending.yaml: must map pipeline names to {results_at, why}, got list"])
    (tmp_path / ledger.LEDGER).unlink()
    assert ledger.read_ledger(tmp_path) == ({}, [])


def _git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_results_at_must_be_the_commit_of_the_lock_committed_now(tmp_path):
    lock = tmp_path / "pipelines" / "real" / "dvc.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("schema: '2.0'\nstages: {a: {cmd: x}}\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "real run")
    first = _git(tmp_path, "rev-parse", "HEAD")
    stale = {"real": ["pipelines/real/dvc.yaml:a: changed deps"]}
    (tmp_path / "code.py").write_text("x = 1\n")  # the change that stales it
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "change")
    assert problems(tmp_path, stale, {"real": Entry(first, "x")}) == []
    assert problems(tmp_path, stale, {"real": Entry(first[:7], "x")}) == []
    assert problems(tmp_path, stale, {"real": Entry("0" * 40, "x")}) == [
        f"pipelines/pending.yaml: real: results_at {'0' * 40} is not a commit of this repository"]
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert problems(tmp_path, stale, {"real": Entry(head, "x")}) == [
        "pipelines/pending.yaml: real: results_at is HEAD itself, the commit whose code stales it: name the commit at "
        "which its lock was last fresh"]
    elsewhere = _git(tmp_path, "commit-tree", f"{first}^{{tree}}", "-m", "not in the history")
    assert problems(tmp_path, stale, {"real": Entry(elsewhere, "x")}) == [
        f"pipelines/pending.yaml: real: results_at {elsewhere[:7]} is not in the history of HEAD"]
    lock.write_text("schema: '2.0'\nstages: {a: {cmd: y}}\n")  # re-run later: the entry must name that commit
    _git(tmp_path, "commit", "-q", "-am", "real re-run")
    assert problems(tmp_path, stale, {"real": Entry(first, "x")}) == [
        f"pipelines/pending.yaml: real: pipelines/real/dvc.lock changed since results_at {first[:7]}: set "
        "results_at to the commit of its last re-run"]


def test_a_pending_pipeline_whose_committed_results_changed_fails(tmp_path):
    stale = {"world_seed1": [
        "pipelines/world_seed1/dvc.yaml:base_model: changed params {...}",
        f"pipelines/world_seed1/dvc.yaml:score_benchmark: {ledger.CHANGED_RESULTS} "
        "{'metrics/world_seed1/evaluate/sugarcrepe': 'modified'}"]}
    got = problems(tmp_path, stale, {"world_seed1": Entry(C, "x")})
    assert got[0].startswith("world_seed1 pipeline is pending, but its committed results differ from its lock")
    assert got[1:] == [f"  {stale['world_seed1'][1]}"]


def test_provenance_in_the_index_and_in_readme_blocks(tmp_path):
    (tmp_path / "reports" / "real").mkdir(parents=True)
    entries, locked = {"real": Entry(C, "precision auto")}, {"world", "real"}
    index = ledger.render_index(["world", "real", "paper", "controls"], entries, locked | {"controls"}, tmp_path,
                                {"controls": {"real", "world"}})
    assert "| world | — | fresh: made by this commit's code, data and params |" in index
    assert "| real | `reports/real/` | results at `2c978be`, pending re-run: precision auto |" in index
    assert "| paper | — | never run here (no lock, no results) |" in index
    assert ("| controls | — | fresh: made by this commit's code from the committed results of pending real (see their "
            "lines) |") in index
    text = "# R\n<!-- provenance: real world -->\nold line\n<!-- /provenance -->\nrest\n"
    filled = ledger.fill_blocks(text, entries, locked, NAMES)
    assert filled == ("# R\n<!-- provenance: real world -->\n"
                      "> *Provenance* — **real**: results at `2c978be`, pending re-run: precision auto.  \n"
                      "> *Provenance* — **world**: fresh: made by this commit's code, data and params.  \n"
                      "<!-- /provenance -->\nrest\n")
    assert ledger.fill_blocks(filled, entries, locked, NAMES) == filled  # idempotent
    shared = ledger.fill_blocks("<!-- provenance: real world_seed1 world -->\n<!-- /provenance -->",
                                {"real": Entry(C, "p"), "world_seed1": Entry(C, "p")}, locked | {"world_seed1"}, NAMES)
    assert "> *Provenance* — **real**, **world_seed1**: results at `2c978be`, pending re-run: p.  " in shared
    checked = ledger.fill_blocks(text, entries, locked, NAMES, controls={"world": "**FAILED** (x)", "real": "n/m",
                                                                         "world_seed1": "n/m"})
    assert checked.split("\n")[2:6] == [
        "> *Provenance* — **real**: results at `2c978be`, pending re-run: precision auto.  ",
        "> *Provenance* — **world**: fresh: made by this commit's code, data and params.  ",
        "> *Positive control* — **real**: n/m.  ", "> *Positive control* — **world**: **FAILED** (x).  "]
    assert ledger.fill_blocks(checked, entries, locked, NAMES, controls={"world": "**FAILED** (x)", "real": "n/m"}) \
        == checked  # idempotent with the control lines too


@pytest.mark.parametrize("text, message", [
    ("<!-- provenance: rael world -->\n<!-- /provenance -->", "line 1: provenance block names unknown pipeline(s) "
                                                                "['rael']"),
    ("<!-- provenance: real-seed1 -->\n<!-- /provenance -->", "unknown pipeline(s) ['real-seed1']"),
    # a lost closing line must not swallow the text up to the next block's end
    ("<!-- provenance: real -->\nprose\n<!-- provenance: world -->\n<!-- /provenance -->",
     "line 1: provenance block ['real'] has no '<!-- /provenance -->' line"),
    ("<!--  provenance: real world -->\n<!-- /provenance -->", "line 1: '<!--  provenance: real world -->' is not"),
    ("<!-- /provenance -->\n", "line 1: '<!-- /provenance -->' is not an opening"),
    ("# no block at all\n", "no provenance block names the locked pipeline(s) ['real', 'world']"),
    ("<!-- provenance: real -->\n<!-- /provenance -->", "no provenance block names the locked pipeline(s) ['world']"),
])
def test_a_provenance_block_written_otherwise_is_named_not_rewritten(text, message):
    with pytest.raises(ValueError) as err:
        ledger.fill_blocks(text, {"real": Entry(C, "x")}, {"world", "real"}, NAMES)
    assert message in str(err.value)


def test_estimate_reads_the_latest_benchmark_json(tmp_path):
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "dvc_repro_world.json").write_text(json.dumps(
        {"wall_s": 540.0, "machine_info": {"cpu_model": "AMD EPYC", "isa_flags": ["avx2", "avx512_bf16"]}}))
    (results / "dvc_repro_controls.json").write_text(json.dumps({"wall_s": 9000.0, "stage_wall_s": {
        "stages/base_model.py --params pipelines/world_seed1/params.yaml": 60.0,
        "stages/train.py --family infonce --params pipelines/world_seed1/params.yaml": 120.0,
        "stages/controls.py seeds --params params.yaml pipelines/world_seed1/params.yaml": 30.0}}))
    (results / "dvc_repro_broken.json").write_text("{not json")
    assert ledger.estimate(tmp_path, "world") == {"minutes": 9.0, "from": "benchmarks/results/dvc_repro_world.json",
                                                  "cpu": "AMD EPYC [avx2 avx512_bf16]", "how": "measured"}
    seed = ledger.estimate(tmp_path, "world_seed1", "world")
    assert seed["minutes"] == 3.0 and seed["cpu"] is None and seed["from"].endswith("dvc_repro_controls.json")
    assert ledger.estimate(tmp_path, "controls")["minutes"] == 0.5
    typed = ledger.estimate(tmp_path, "world_type", "world")
    assert typed["minutes"] == 9.0 and typed["how"].startswith("as world (derived")
    assert ledger.estimate(tmp_path, "real") is None
    (results / "dvc_repro_real.json").write_text(json.dumps({"wall_s": 60.0, "exit_code": 1}))  # a failed run
    assert ledger.estimate(tmp_path, "real") is None


def test_plan_takes_what_fits_in_dependency_order():
    up = {"controls": {"world_seed1", "real_seed1"}, "world_seed1": set(), "real_seed1": set(), "real": set()}
    minutes = {"world_seed1": 12.0, "real_seed1": 35.0, "real": 58.0, "controls": 1.0}
    pending = ["real", "world_seed1", "real_seed1", "controls"]
    assert ledger.plan(pending, 60, up, minutes) == (["world_seed1", "real_seed1", "controls"], ["real"])
    # the controls wait for every pending pipeline they gather
    assert ledger.plan(pending, 20, up, minutes) == (["world_seed1"], ["real_seed1", "controls", "real"])
    assert ledger.plan(pending, 5, up, minutes) == ([], ["world_seed1", "real_seed1", "controls", "real"])
    assert ledger.plan(["real"], 600, {}, {"real": None}) == ([], ["real"])  # no estimate: never planned


def test_status_and_plan_on_this_tree(monkeypatch):
    """``lineage status --plan``: the states come from the ledger and the stale map (stubbed here: the real one runs
    ``dvc status`` per pipeline), the estimates from the committed benchmark JSONs, the controls after what they
    gather."""
    from concrete_jungle import lineage

    stale = {"world_seed1": ["pipelines/world_seed1/dvc.yaml:pipelines/world_seed1/dvc.yaml:base_model: changed params"],
             "world_n1024": ["pipelines/world_n1024/dvc.yaml:train@infonce: changed deps",
                             "pipelines/world_n1024/dvc.yaml:train_margin@cement: changed deps"],
             "controls": ["pipelines/controls/dvc.lock: seeds was made from metrics/world/evaluate/x a, but y"]}
    entries = {name: Entry(C, "precision auto") for name in stale}
    monkeypatch.setattr(lineage, "stale_pipelines", lambda repo, only=None: stale)
    monkeypatch.setattr(ledger, "read_ledger", lambda repo: (entries, []))
    text = lineage.status(lineage.REPO, plan_minutes=30)
    lines = text.splitlines()
    assert lines[0] == "world          fresh"
    assert ("paper          never run (parked: python -m concrete_jungle.lineage enable paper, then dvc repro "
            "pipelines/paper/dvc.yaml)") in lines
    i = lines.index("world_seed1    pending: results at 2c978be, why: precision auto")
    assert lines[i + 1].strip() == "stale stages (1): base_model"
    assert lines[i + 2].strip().startswith("re-run: dvc repro pipelines/world_seed1/dvc.yaml")
    j = lines.index("world_n1024    pending: results at 2c978be, why: precision auto")
    assert lines[j + 1].strip() == "stale stages (2): train@infonce, train_margin@cement"
    k = lines.index("controls       pending: results at 2c978be, why: precision auto")
    assert lines[k + 1].strip() == "stale stages (1): seeds"
    plan = text[text.index("plan for 30 min"):].splitlines()
    # world_n1024 (~13 min in the committed controls run) fits; world_seed1 (~32) does not, so the controls wait
    assert plan[1].startswith("  1. dvc repro pipelines/world_n1024/dvc.yaml")
    assert plan[2] == "  left for later: world_seed1, controls"
    stale["world"] = ["dvc.yaml:train@infonce: changed deps"]
    text = lineage.status(lineage.REPO, plan_minutes=30)
    assert "world          STALE (the world is never pending: re-run it)" in text
    assert "  1. dvc repro dvc.yaml" in text  # a stale world always comes first
    text = lineage.status(lineage.REPO, plan_minutes=1)
    assert "  the stale world alone needs ~" in text and ": over the budget" in text
    del stale["world"], stale["controls"]  # the controls fresh: re-running what they gather stales them
    text = lineage.status(lineage.REPO, plan_minutes=60)
    assert ("dvc repro pipelines/controls/dvc.yaml   (<1 min)   [it gathers world_n1024, world_seed1: stale once "
            "they are re-run; re-run it too or declare it pending]") in text


def test_status_cli_refuses_a_plan_without_minutes(capsys):
    from concrete_jungle import lineage

    with pytest.raises(SystemExit):
        lineage.main(["check", "--plan", "30"])
    with pytest.raises(SystemExit):
        lineage.main(["status", "--plan", "0"])
    assert "--plan takes a positive number of minutes" in capsys.readouterr().err
