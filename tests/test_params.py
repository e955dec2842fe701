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
        load_params(PARAMS, overrides={"profile": "world", **override})


def test_margin_only_change_reruns_only_margin_stages():
    """`dvc exp run -S margin.tau=0.3` must re-run only margin-based trainings: only their stages track `margin`."""
    import yaml

    stages = yaml.safe_load((PARAMS.parent / "dvc.yaml").read_text())["stages"]
    with_margin = sorted(name for name, st in stages.items()
                         if "margin" in (st.get("do", st).get("params") or []))
    assert with_margin == ["gradient_ratio", "train_margin"]
    assert "${train.margin_losses}" in stages["train_margin"]["matrix"]["loss"]
