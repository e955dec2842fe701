"""The DVC pipelines are written from one spec: code deps are each stage's import closure, params are tracked by
key, and the lock check catches a stale or incoherent lock."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from concrete_jungle import lineage
from concrete_jungle.params import load_params
from concrete_jungle.parking import parking_problems, pipeline_file

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "src" / "concrete_jungle"


def test_committed_pipelines_are_the_spec():
    for params_file, dvc_yaml in lineage.PROFILE_FILES.items():
        path = pipeline_file(dvc_yaml, REPO)
        assert (REPO / path).read_text() == lineage.render(params_file), f"{path}: run lineage write"


def test_a_fresh_clone_holds_no_dvc_yaml_of_a_pipeline_that_never_ran():
    """Issue 29 item 4: DVC collects every dvc.yaml, so a never-run pipeline's made ~1,000 lines of `dvc status`
    and the warnings of every `dvc exp run`; such a pipeline is parked (dvc.parked.yaml) until enabled."""
    dvc_yamls = sorted(str(p.relative_to(REPO)) for p in [REPO / "dvc.yaml", *(REPO / "pipelines").glob("*/dvc.yaml")])
    assert dvc_yamls == sorted(d for d in lineage._pipelines() if (REPO / d).with_suffix(".lock").is_file())
    assert {pipeline_file(d, REPO) for d in lineage._pipelines()} >= {"pipelines/paper/dvc.parked.yaml",
                                                                          "pipelines/paper_n256/dvc.parked.yaml"}


@pytest.mark.slow
def test_dvc_plots_show_loads_every_plot_of_the_checkout():
    """Issue 29 item 4: on a fresh clone `dvc plots show` ended with "DVC failed to load some plots" (the plots of
    the GPU pipelines that never ran); parked, they are not collected, and every committed plot loads (~15 s)."""
    proc = subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "--json"], cwd=REPO, capture_output=True,
                          text=True, check=True)
    shown = json.loads(proc.stdout)
    assert shown["data"] and not shown.get("errors"), shown.get("errors")
    assert "failed to load" not in proc.stderr, proc.stderr[-2000:]


def _copy_tracked(dst: Path, skip: tuple[str, ...]) -> None:
    """Copy the repository's tracked files (``git ls-files``) but those under ``skip`` into ``dst``: never a
    virtual environment, a DVC cache or pytest's own folders (a copytree of the checkout took CI's ``.venv-ci``,
    12.6 GB, and filled the disk of the CI run of de6a435)."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in tracked.decode().split("\0"):
        if rel and not rel.startswith(skip) and (REPO / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)


def test_enable_and_park_a_pipeline(tmp_path):
    repo = tmp_path / "repo"
    _copy_tracked(repo, skip=("data/", "models/", "metrics/", "reports/", "benchmarks/", "docs/", "tests/"))
    assert lineage.enable("paper", repo) == "pipelines/paper/dvc.yaml"
    assert (repo / "pipelines/paper/dvc.yaml").read_text() == lineage.render("pipelines/paper/params.yaml", repo)
    assert not (repo / "pipelines/paper/dvc.parked.yaml").exists()
    assert "pipelines/paper/dvc.yaml" in lineage.write(repo)  # write keeps the enabled form
    with pytest.raises(ValueError, match="pipelines/paper/dvc.yaml is not parked"):
        lineage.enable("paper", repo)
    (repo / "pipelines/paper/dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    with pytest.raises(ValueError, match=r"has a lock \(pipelines/paper/dvc.lock\)"):
        lineage.park("paper", repo)
    (repo / "pipelines/paper/dvc.lock").unlink()
    assert lineage.park("paper", repo) == "pipelines/paper/dvc.parked.yaml"
    (repo / "pipelines/paper/dvc.lock").write_text("schema: '2.0'\nstages: {}\n")  # ran, yet parked
    assert parking_problems("pipelines/paper/dvc.yaml", repo) == [
        "pipelines/paper/dvc.parked.yaml: a parked pipeline has a lock; python -m concrete_jungle.lineage enable paper"]
    (repo / "pipelines/paper/dvc.lock").unlink()
    assert pipeline_file("pipelines/paper/dvc.yaml", repo) == "pipelines/paper/dvc.parked.yaml"
    for bad, match in (("world", "never parked"), ("controls", "never parked"), ("nope", "no pipeline named 'nope'")):
        with pytest.raises((ValueError, KeyError), match=match):
            lineage.park(bad, repo)


def test_code_deps_are_the_import_closure():
    train = lineage.code_deps("stages/train.py")
    assert {"stages/train.py", "src/concrete_jungle/losses.py", "src/concrete_jungle/training.py",
            "src/concrete_jungle/models/checkpoints.py", "src/concrete_jungle/models/build.py",
            "src/concrete_jungle/model_configs", "src/concrete_jungle/params.py"} <= set(train)
    assert not [d for d in train if "/evaluation/" in d or d.startswith(("analysis/", "stages/embed"))]
    embed = lineage.code_deps("stages/embed.py")
    assert {"src/concrete_jungle/evaluation/embed.py", "src/concrete_jungle/models/encoding.py"} & set(embed)
    assert not [d for d in embed if d.endswith(("losses.py", "training.py", "lexical.py", "sugarcrepe_pp.py"))]
    bench = lineage.code_deps("stages/benchmark.py")  # prepare and score SugarCrepe / SugarCrepe++: no model code
    assert "src/concrete_jungle/evaluation/sugarcrepe_pp.py" in bench
    assert not [d for d in bench if "/models/" in d or d.endswith(("losses.py", "training.py"))]
    plant = lineage.code_deps("stages/concreteplant.py")
    assert "src/concrete_jungle/concreteplant/lexicon/opposites.yaml" in plant  # data the lexical rewriter reads
    assert "src/concrete_jungle/models/build.py" not in plant


def test_model_config_deps_are_the_configs_a_profile_names():
    """A stage depends on the shipped open_clip config files its profile names, not on the whole folder: adding
    fix candidate 2's config (cj-world-effnet-attn) once staled every world stage."""
    def train_deps(dvc_yaml):
        return set(yaml.safe_load((REPO / dvc_yaml).read_text())["stages"]["base_model"]["deps"])

    folder = "src/concrete_jungle/model_configs"
    world = train_deps("dvc.yaml")
    assert f"{folder}/cj-world-vit.json" in world
    assert not {folder, f"{folder}/cj-world-effnet.json", f"{folder}/cj-world-effnet-attn.json"} & world
    attn = train_deps("pipelines/world_effnet_attn/dvc.yaml")
    assert f"{folder}/cj-world-effnet-attn.json" in attn and f"{folder}/cj-world-vit.json" not in attn
    assert not [d for d in train_deps("pipelines/paper/dvc.parked.yaml") if d.startswith(folder)]  # ViT-B-32: none
    p = load_params(REPO / "params.yaml")
    assert lineage.model_config_deps(["a.py", folder], [p]) == ["a.py", f"{folder}/cj-world-vit.json"]
    assert lineage.model_config_deps(["a.py"], [p]) == ["a.py"]  # a stage that builds no model keeps none


def test_params_are_tracked_by_key():
    p = load_params(REPO / "params.yaml")
    keys = lineage.param_keys(p, "train", exclude=("datasets", "losses", "margin_losses", "baselines"))
    assert "train.lr" in keys and "train.losses" not in keys and "train" not in keys
    assert "base_model.model.kind" in lineage.param_keys(p, "base_model")
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for name, st in stages.items():
        for key in st.get("do", st)["params"]:
            assert "." in key or key in ("seed", "profile"), f"{name} tracks a whole section: {key}"


def test_a_webdataset_pipeline_writes_one_shard_folder_a_training_input():
    """Issue 21: with train.data_format webdataset (pipelines/world_wds) stage shards writes one DVC output a folder;
    the hard-negative families read the ConcreteBatches' folders, the baseline only the anchors' (so a change of
    train.baselines or train.datasets re-runs only the stages that read the folder it changes)."""
    stages = lineage.pipeline("pipelines/world_wds/params.yaml")["stages"]
    folders = [f"data/world_wds/shards/{x}" for x in ("hc", "lc", "wo", "anchors")]
    assert stages["shards"]["outs"] == folders
    for family in ("train", "train_margin"):
        deps = stages[family]["do"]["deps"]
        assert set(folders[:3]) <= set(deps) and folders[3] not in deps
    deps = stages["train_baseline"]["do"]["deps"]
    assert folders[3] in deps and not set(folders[:3]) & set(deps)
    assert "shards" not in lineage.pipeline("params.yaml")["stages"]  # the JSONL world has no such stage


def test_every_stage_runs_after_the_pre_flight_of_its_params_file():
    """Issue 22: ``check_params`` depends on the whole params file and every other stage on its marker, so a
    changed params file is validated (unknown and missing keys named) before any stage of the pipeline runs."""
    for params_file, dvc_yaml in lineage.PROFILE_FILES.items():
        stages = yaml.safe_load((REPO / pipeline_file(dvc_yaml, REPO)).read_text())["stages"]
        marker = f"data/{load_params(REPO / params_file).profile}/params_checked.txt"
        check = stages["check_params"]
        assert params_file in check["deps"] and check["outs"] == [marker], dvc_yaml
        assert "src/concrete_jungle/params.py" in check["deps"]
        late = [name for name, st in stages.items() if name != "check_params"
                and marker not in st.get("do", st)["deps"]]
        assert not late, f"{dvc_yaml}: {late} may run before the params file is checked"


def test_real_stages_depend_on_their_source_data():
    stages = yaml.safe_load((REPO / "pipelines/real/dvc.yaml").read_text())["stages"]
    assert "../shared/data/coco/annotations/captions_val2017.json" in stages["corpus"]["deps"]
    assert "../shared/data/coco/val2017" in stages["corpus"]["deps"]
    assert {"../shared/data/sugarcrepe", "../shared/data/sugarcrepe_pp"} <= set(stages["benchmark"]["deps"])
    assert stages["corpus"]["params"] == [{"pipelines/real/params.yaml": [
        "profile", "corpus.source", "corpus.coco.captions", "corpus.coco.images", "corpus.coco.exclude_filenames",
        "seed", "corpus.heldout_fraction", "corpus.exclude.sugarcrepe", "corpus.exclude.sugarcrepe_pp",
        "corpus.exclude.karpathy_coco", "corpus.exclude.karpathy_flickr30k", "corpus.exclude.filenames"]}]
    assert {"../shared/data/sugarcrepe", "../shared/data/sugarcrepe_pp"} <= set(stages["corpus"]["deps"])
    # the stages that decode anchor images depend on the real corpus' image folders
    assert {"../shared/data/coco/val2017", "../shared/data/coco/train2017"} <= set(stages["base_model"]["deps"])


def test_lock_coherence_names_a_stage_made_from_another_upstream(tmp_path):
    lock = {"schema": "2.0", "stages": {
        "base_model": {"cmd": "x", "outs": [{"path": "models/w/base", "md5": "aaa.dir"}]},
        "train@hc-infonce": {"cmd": "y", "deps": [{"path": "models/w/base", "md5": "bbb.dir"}],
                             "outs": [{"path": "models/w/hc-infonce", "md5": "ccc.dir"}]},
        "evaluate@hc-infonce": {"cmd": "z", "deps": [{"path": "models/w/hc-infonce", "md5": "ccc.dir"}]}}}
    path = tmp_path / "dvc.lock"
    path.write_text(yaml.safe_dump(lock))
    (problem,) = lineage._lock_coherence(path)
    assert "train@hc-infonce was made from models/w/base bbb.dir, but base_model records aaa.dir" in problem


def _top_level_imports(path: Path) -> set[str]:
    mods = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return {m for m in mods if m.startswith("concrete_jungle")}


def test_package_never_imports_analysis_and_has_no_import_cycle():
    modules = {}
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = f
        assert "import analysis" not in f.read_text() and "from analysis" not in f.read_text(), f
    graph = {m: {d for d in _top_level_imports(f) if d in modules and d != m} for m, f in modules.items()}
    state: dict[str, int] = {}

    def visit(m, stack):
        state[m] = 1
        for d in graph[m]:
            assert state.get(d) != 1, f"import cycle: {' -> '.join([*stack, m, d])}"
            if d not in state:
                visit(d, [*stack, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


def test_no_module_over_900_lines():
    long = {f.relative_to(REPO).as_posix(): n for f in PKG.rglob("*.py")
            if (n := len(f.read_text().splitlines())) > 900}
    assert not long, long


def _fresh_copy(tmp_path) -> Path:
    """What git tracks (and untracked files not ignored) copied to ``tmp_path/main`` with the shared data beside
    it: no cached outputs, no verdict folders, no git history."""
    shared = REPO.parent / "shared"
    if not shared.is_dir():
        pytest.skip(f"no shared data folder at {shared}")
    work = tmp_path / "main"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, work / rel)
    (tmp_path / "shared").symlink_to(shared)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    return work


@pytest.mark.slow
def test_check_passes_on_a_fresh_copy_without_outputs(tmp_path):
    """CI's condition: a checkout holding only what git tracks (no cached outputs, no verdict folders) with the
    shared data beside it; outputs absent from it are not problems, anything else is. Skipped where ``.ci/run``
    has just run the same check on a fresh clone of this very commit (``CJ_LINEAGE_CHECKED_FRESH``)."""
    checked = os.environ.get("CJ_LINEAGE_CHECKED_FRESH")
    if checked:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
        if checked == head and not dirty.strip():
            pytest.skip(f".ci/run checked this fresh clone of {head[:12]} already (python -m concrete_jungle.lineage "
                        "check)")
    work = _fresh_copy(tmp_path)
    assert not (work / "data" / "world" / "verdicts").exists()
    assert lineage.check(work) == []


def _pretend_world_rerun(work: Path, rel: str) -> None:
    """What ``dvc repro`` would record for the world after ``rel`` changed (the copy has no outputs to re-make):
    every world-lock dep on ``rel`` gets the file's new md5 and size."""
    import hashlib

    data = (work / rel).read_bytes()
    lock = yaml.safe_load((work / "dvc.lock").read_text())
    for st in lock["stages"].values():
        for dep in st.get("deps", []):
            if dep["path"] == rel:
                dep["md5"], dep["size"] = hashlib.md5(data).hexdigest(), len(data)
    (work / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False, width=4096))


@pytest.mark.slow
def test_ledger_rules_on_a_throwaway_copy(tmp_path):
    """Issue 27's acceptance on the world and one other pipeline (world_seed1, pending since the precision change):
    a comment appended to training.py fails only the world (d) until the world is re-run; a stale pipeline missing
    from the ledger fails by name (b); provenance or a committed dvc.yaml that differs from the spec fails (a).
    (c), a fresh pipeline left in the ledger, is tested on hand-made states in test_ledger.py.)"""
    work = _fresh_copy(tmp_path)
    only = {"world", "world_seed1"}  # each check runs dvc status on these two only (CI time)
    assert "world_seed1" in yaml.safe_load((work / "pipelines/pending.yaml").read_text())
    training = work / "src/concrete_jungle/training.py"
    training.write_text(training.read_text() + "# a comment\n")
    got = lineage.check(work, only)
    assert got[0] == "world pipeline is stale and is never pending: re-run it (dvc repro) in this change"
    assert any("training.py" in line for line in got[1:])
    assert not [line for line in got if line.startswith("world_seed1")]  # pending, declared: not a problem
    _pretend_world_rerun(work, "src/concrete_jungle/training.py")
    assert lineage.check(work, only) == []  # the comment plus the world re-run plus the ledger entry pass
    ledger_text = (work / "pipelines/pending.yaml").read_text()
    entries = yaml.safe_load(ledger_text)
    del entries["world_seed1"]
    (work / "pipelines/pending.yaml").write_text(yaml.safe_dump(entries))
    lineage.write(work)  # the provenance written anew: only the missing entry is left
    got = lineage.check(work, only)
    assert got[0].startswith("world_seed1 pipeline is stale and not in pipelines/pending.yaml") and \
        not [line for line in got if not line.startswith(("world_seed1", "  "))]
    (work / "pipelines/pending.yaml").write_text(ledger_text)
    assert lineage.check(work, set()) == [  # the provenance no longer matches the ledger (no dvc status needed)
        "reports/README.md differs from the spec: run python -m concrete_jungle.lineage write",
        "README.md differs from the spec: run python -m concrete_jungle.lineage write"]
    lineage.write(work)
    dvc_yaml = work / "pipelines/world_seed1/dvc.yaml"
    dvc_yaml.write_text(dvc_yaml.read_text() + "# edited by hand\n")
    assert lineage.check(work, set()) == [
        "pipelines/world_seed1/dvc.yaml differs from the spec: run python -m concrete_jungle.lineage write"]
    lineage.write(work)
    # a deleted lock does not hide a stale pipeline: its committed results stay, and the world always has a lock
    (work / "pipelines/world_seed1/dvc.lock").unlink()
    (work / "dvc.lock").unlink()
    got = lineage.check(work, set())
    assert "world pipeline has no lock dvc.lock, and the world always has one" in got
    assert ("world_seed1 pipeline has no lock pipelines/world_seed1/dvc.lock, yet committed results "
            "(metrics/world_seed1/ or reports/world_seed1/): restore the lock or remove them") in got
