"""Each profile's params file is validated into typed config; bad or missing values fail at start-up naming the key."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from concrete_jungle.params import ParamsError, load_params

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "params.yaml"
REAL = REPO / "pipelines" / "real" / "params.yaml"
PAPER = REPO / "pipelines" / "paper" / "params.yaml"


def test_committed_params_of_every_profile():
    world = load_params(PARAMS)
    assert world.profile == "world"
    assert world.base_model.model.kind == "world"
    assert world.margin.to_config().tau == 0.15
    real = load_params(REAL)
    assert real.corpus.source == "coco"
    assert real.base_model.model.kind == "lit"
    assert real.benchmark.source == "sugarcrepe"
    assert str(real.data_dir) == "data/real"
    assert (real.margin.m_min, real.margin.m_max, real.margin.c_tilde) == (-2.0, 2.0, 4.0)  # Sec. 3.1
    paper = load_params(PAPER)
    assert (paper.base_model.model.name, paper.base_model.model.pretrained) == ("ViT-B-32-quickgelu", "openai")
    assert paper.train.batch_size == 1024


@pytest.mark.parametrize("path", [PARAMS, REAL, PAPER], ids=["world", "real", "paper"])
def test_params_files_are_complete(path):
    """Every key a stage reads is written in the file, so DVC tracks it by name and `-S` edits an existing key."""
    raw = yaml.safe_load(path.read_text())
    assert load_params(path).model_dump(mode="json") == raw


def test_missing_required_key_is_named(tmp_path):
    raw = yaml.safe_load(PARAMS.read_text())
    del raw["base_model"]
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError, match=r"base_model: missing required key"):
        load_params(bad)


def test_loading_params_imports_no_heavy_library():
    code = ("import sys, time; t = time.perf_counter(); from concrete_jungle.params import load_params; "
            f"load_params({str(PARAMS)!r}); dt = time.perf_counter() - t; "
            "heavy = sorted({'torch', 'open_clip', 'sklearn', 'transformers', 'timm'} & set(sys.modules)); "
            "print(heavy, dt)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "[]", out
    assert float(out[1]) < 1.0


@pytest.mark.parametrize(
    "override, key",
    [
        ({"train": {"lr": "fast"}}, "train.lr"),
        ({"margin": {"m_min": 3.0, "m_max": 2.0}}, "margin"),
        ({"margin": {"tau": 0}}, "margin.tau"),
        ({"train": {"batch_size": 1}}, "train.batch_size"),
        ({"train": {"losses": ["triplet"]}}, "train.losses"),
        ({"concreteplant": {"top_k": 0}}, "concreteplant.top_k"),
        ({"profile": "No Such/Folder"}, "profile"),
        ({"margin": {"m_max": float("inf")}}, "margin.m_max"),
        ({"train": {"lr": float("nan")}}, "train.lr"),
        ({"train": {"datasets": []}}, "train.datasets"),
        ({"concreteplant": {"datasets": ["hc"]}}, "train.datasets"),
        ({"evaluate": {"positive_control": {"alpha": 0}}}, "evaluate.positive_control.alpha"),
        ({"evaluate": {"positive_control": {"min_gain": -1}}}, "evaluate.positive_control.min_gain"),
        ({"evaluate": {"positive_control": {"power": 1.0}}}, "evaluate.positive_control.power"),
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        load_params(PARAMS, overrides=override)


def test_values_written_as_strings_by_exp_run_are_typed():
    p = load_params(PARAMS, overrides={"margin": {"tau": "0.3"}, "train": {"max_steps": "7"}})
    assert p.margin.tau == 0.3 and isinstance(p.margin.tau, float)
    assert p.train.max_steps == 7 and isinstance(p.train.max_steps, int)


def test_scene_negatives_need_the_scene_world():
    with pytest.raises(ParamsError, match="scene_world"):
        load_params(REAL, overrides={"concreteplant": {"image_negatives": "scene"}})


def test_context_length_must_fit_the_model():
    # the world model reads 32 tokens: a 77-token keyword rule would let the sampler pick words it never sees
    with pytest.raises(ParamsError) as err:
        load_params(PARAMS, overrides={"concreteplant": {"context_length": 77}})
    msg = str(err.value)
    assert "concreteplant.context_length (77) exceeds base_model.model.context_length (32)" in msg
    assert "'corpus'" not in msg  # the cross-section message does not dump the whole config


def test_training_grid_names_match_the_loss_registry():
    import typing

    from concrete_jungle.losses import HARD_NEGATIVE_LOSSES, LOSSES, MARGIN_LOSSES
    from concrete_jungle.params import TrainParams

    def allowed(field):
        (lit,) = typing.get_args(TrainParams.model_fields[field].annotation)
        return set(typing.get_args(lit))

    assert allowed("margin_losses") == set(MARGIN_LOSSES)
    assert allowed("losses") == set(HARD_NEGATIVE_LOSSES) - set(MARGIN_LOSSES)
    assert allowed("baselines") == set(LOSSES) - set(HARD_NEGATIVE_LOSSES)


@pytest.mark.parametrize(
    "override, key",
    [
        ({"train": {"margin_losses": ["infonce"]}}, "train.margin_losses"),
        ({"train": {"losses": ["cement"]}}, "train.losses"),
        ({"train": {"losses": [], "margin_losses": [], "baselines": []}}, "nothing to train"),
        ({"concreteplant": {"shard_index": 2, "shard_count": 2}}, "concreteplant.shard_index"),
        ({"concreteplant": {"image_edit": {"strength": 0.2, "num_inference_steps": 4}}}, "image_edit.strength"),
        ({"concreteplant": {"rewriter": {"backend": "gpt"}}}, "concreteplant.rewriter.backend"),
        ({"gradient_ratio": {"batch_sizes": [0, 8]}}, "gradient_ratio.batch_sizes"),
        ({"margin": {"static": "one"}}, "margin.static"),
    ],
)
def test_grid_and_generation_params_name_the_key(override, key):
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        load_params(PARAMS, overrides=override)


def test_margin_only_change_reruns_only_margin_stages():
    """`dvc exp run -S margin.tau=0.3` must re-run only margin-based trainings: only their stages track margin keys."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    with_tau = sorted(name for name, st in stages.items() if "margin.tau" in (st.get("do", st).get("params") or []))
    assert with_tau == ["gradient_ratio", "train_margin"]
    assert stages["train_margin"]["foreach"] == "${train.margin_losses}"  # one stage a margin-loss family
    train = stages["train"]["do"]["params"]
    assert "train.lr" in train and "train.datasets" in train and "train.losses" not in train


def test_control_arms_and_binding_rewriter_params_are_checked():
    from pydantic import ValidationError

    from concrete_jungle.params import RewriterParams
    from concrete_jungle.suites_config import PositiveControlParams

    assert PositiveControlParams().control_losses == ["infonce"] and PositiveControlParams().headroom_share == 0.5
    with pytest.raises(ValidationError, match="control_losses repeats a loss"):
        PositiveControlParams(control_losses=["infonce", "infonce"])
    with pytest.raises(ValidationError, match="control_losses"):
        PositiveControlParams(control_losses=[])
    with pytest.raises(ValidationError, match="headroom_share"):
        PositiveControlParams(headroom_share=0.0)
    assert RewriterParams(prefer_in_caption=True).prefer_in_caption
    with pytest.raises(ValidationError, match="prefer_in_caption is a lexical-backend option; backend 'vllm'"):
        RewriterParams(backend="vllm", prefer_in_caption=True)


def test_a_key_left_out_is_named_even_where_the_class_has_a_default(tmp_path):
    # issue 22: a stage run directly used to fill a deleted key with the class default behind the user's back
    raw = yaml.safe_load(PARAMS.read_text())
    del raw["train"]["lr"]
    del raw["evaluate"]["probe"]["tasks"]["shape"]["group"]
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ParamsError, match=r"train\.lr: missing key; evaluate\.probe\.tasks\.shape\.group: missing "
                                          r"key \(every key a stage reads is written"):
        load_params(bad)
    # the committed profiles set every key
    from concrete_jungle.params import unset_keys
    assert unset_keys(load_params(PARAMS)) == [] and unset_keys(load_params(REAL)) == []


def test_the_pre_flight_stage_names_an_unknown_key_and_writes_a_constant_marker(tmp_path):
    script = str(REPO / "stages" / "check_params.py")
    raw = yaml.safe_load(PARAMS.read_text())
    raw["margin"]["tua"] = 0.3  # a misspelt key: no stage reads it, so no stage would re-run
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, script, "--params", str(bad)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and "margin.tua: Extra inputs are not permitted" in proc.stderr
    assert not (tmp_path / "data").exists()
    markers = []
    for tau in (0.1, 0.3):
        raw = yaml.safe_load(PARAMS.read_text())
        raw["margin"]["tau"] = tau
        good = tmp_path / f"good{tau}.yaml"
        good.write_text(yaml.safe_dump(raw))
        subprocess.run([sys.executable, script, "--params", str(good)], cwd=tmp_path, check=True, capture_output=True)
        markers.append((tmp_path / "data" / "world" / "params_checked.txt").read_bytes())
    assert markers[0] == markers[1] and b"validated" in markers[0]  # a valid edit stales nothing by itself


def _check_params_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_params_stage", REPO / "stages" / "check_params.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pre_flight_stage_refuses_probe_tasks_the_world_cannot_hold(tmp_path):
    # H27's first run: a world of 3-object scenes (min_objects 3) passed check_params and failed at prepare_probe
    # three minutes later; the pre-flight now names every task, and writes no marker
    script = str(REPO / "stages" / "check_params.py")
    raw = yaml.safe_load(PARAMS.read_text())
    raw["world"].update(min_objects=3, object_count_weights=[1.0])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, script, "--params", str(bad)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0
    assert ("evaluate.probe.tasks.shape: 'shape' needs single-object scenes (world.min_objects 1), got "
            "world.min_objects 3, world.max_objects 3") in proc.stderr
    assert "evaluate.probe.tasks.count: count needs world.min_objects < world.max_objects" in proc.stderr
    assert not (tmp_path / "data").exists()
    # the way such a world is drawn (pipelines/world_effnet_attn_long_clutter): min_objects 1, weights on 3 objects
    raw["world"].update(min_objects=1, object_count_weights=[0.0, 0.0, 1.0])
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(raw))
    subprocess.run([sys.executable, script, "--params", str(good)], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "data" / "world" / "params_checked.txt").exists()


@pytest.mark.parametrize("attribute", ["shape", "position", "count"])
@pytest.mark.parametrize("min_objects,max_objects", [(1, 3), (2, 3), (3, 3), (1, 1)])
def test_the_pre_flight_probe_rule_is_prepare_probes_rule(tmp_path, attribute, min_objects, max_objects):
    from concrete_jungle.evaluation.linear_probe import prepare_probe
    from concrete_jungle.params import ProbeParams, WorldConfig

    world = WorldConfig(min_objects=min_objects, max_objects=max_objects, object_count_weights=None)
    probe = ProbeParams(tasks={"t": {"format": "scene_world", "attribute": attribute, "test_size": 4}},
                        train_size=8, val_size=2, Cs=[1.0])
    refused = _check_params_module().world_probe_conflicts(probe.tasks, world)
    try:
        prepare_probe(probe, world, tmp_path, seed=0)
        prepared = True
    except ValueError as err:
        assert "needs" in str(err)
        prepared = False
    assert prepared == (not refused)
    assert bool(refused) == ((attribute != "count" and min_objects != 1)
                             or (attribute == "count" and min_objects == max_objects))


def test_heldout_bins_must_span_the_concreteness_scale():
    # issue 22 item 3: bins that leave part of 1-5 uncovered used to pass the params and fail at scoring, after every
    # model was trained, on the first pair outside them
    from pydantic import ValidationError

    from concrete_jungle.suites_config import HeldoutParams
    for bad in ([1.0, 3.0, 4.0], [2.0, 5.0], [1.0, 4.0, 3.0, 5.0], [1.0, 1.0, 5.0]):
        with pytest.raises(ValidationError, match=r"evaluate\.heldout\.c_bins must be increasing edges from 1 to 5"):
            HeldoutParams(c_bins=bad)
    assert HeldoutParams(c_bins=[1, 5]).c_bins == [1.0, 5.0]
