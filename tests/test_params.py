"""params.yaml is validated into typed config; bad values fail at start-up naming the key."""

from pathlib import Path

import pytest

from concrete_jungle.params import ParamsError, load_params

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def test_committed_params_resolve_for_every_profile():
    world = load_params(PARAMS, overrides={"profile": "world"})
    assert world.profile == "world"
    assert world.base_model.model.kind == "world"
    assert world.margin.to_config().tau == 0.15
    real = load_params(PARAMS, overrides={"profile": "real"})
    assert real.corpus.source == "coco"
    assert real.base_model.model.kind == "lit"
    assert real.benchmark.source == "sugarcrepe"
    assert str(real.data_dir) == "data/real"
    # overrides leave what they do not name: the margin is the paper's in both profiles
    assert (real.margin.m_min, real.margin.m_max, real.margin.c_tilde) == (-2.0, 2.0, 4.0)


@pytest.mark.parametrize(
    "override, key",
    [
        ({"train": {"lr": "fast"}}, "train.lr"),
        ({"margin": {"m_min": 3.0, "m_max": 2.0}}, "margin"),
        ({"margin": {"tau": 0}}, "margin.tau"),
        ({"train": {"batch_size": 1}}, "train.batch_size"),
        ({"train": {"losses": ["triplet"]}}, "train.losses"),
        ({"concreteplant": {"top_k": 0}}, "concreteplant.top_k"),
        ({"profile": "nope"}, "profile"),
        ({"margin": {"m_max": float("inf")}}, "margin.m_max"),
        ({"train": {"lr": float("nan")}}, "train.lr"),
        ({"train": {"datasets": []}}, "train.datasets"),
        ({"concreteplant": {"datasets": ["hc"]}}, "train.datasets"),
        ({"profiles": {"real": {"train": {"lr": "slow"}}}}, "train.lr"),  # a profile not selected is checked too
    ],
)
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        load_params(PARAMS, overrides={"profile": "world", **override})


def test_values_written_as_strings_by_exp_run_are_typed():
    p = load_params(PARAMS, overrides={"profile": "world", "margin": {"tau": "0.3"}, "train": {"max_steps": "7"}})
    assert p.margin.tau == 0.3 and isinstance(p.margin.tau, float)
    assert p.train.max_steps == 7 and isinstance(p.train.max_steps, int)


def test_scene_negatives_need_the_scene_world():
    with pytest.raises(ParamsError, match="scene_world"):
        load_params(PARAMS, overrides={"profile": "real", "concreteplant": {"image_negatives": "scene"}})
