"""DVC stage `check_params`: the pre-flight of every pipeline (issue 22). It depends on the profile's whole params
file and every other stage depends on its output, so whenever the file changes ``dvc repro`` (and ``dvc exp run``)
validates it first: a misspelt or unknown key, a key left out (no class default is used behind the file) or a bad
value fails here, naming the key, before any stage runs; an edit that only adds an unknown key would otherwise stale
no stage and pass unnoticed. Writes ``data/<p>/params_checked.txt`` (the same bytes for every valid file, so a valid
edit re-runs only the stages that read the keys it changed).
"""

from concrete_jungle.cli import run_stage
from concrete_jungle.params import Params

#: The marker's content: constant, so that a valid edit of the params file stales nothing downstream by itself.
MARKER_TEXT = "the params file was validated before any stage ran (stages/check_params.py)\n"


def world_probe_conflicts(tasks, world) -> list[str]:
    """The ``scene_world`` probe tasks (``tasks``: ``evaluate.probe.tasks``, name -> ProbeTask) that ``world`` (the
    params' WorldConfig) cannot hold, one message each naming the task, or ``[]``, by
    :func:`concrete_jungle.suites_config.world_task_conflict`, the rule ``prepare_probe`` applies minutes in
    (docs/instrument.md H27). Never raises."""
    from concrete_jungle.suites_config import world_task_conflict

    out = []
    for name, task in tasks.items():
        why = world_task_conflict(task.attribute, world) if task.format == "scene_world" else None
        if why:
            out.append(f"evaluate.probe.tasks.{name}: {why}, got world.min_objects {world.min_objects}, "
                       f"world.max_objects {world.max_objects} (drop the task, or keep min_objects 1 and draw the "
                       "corpus's object counts with world.object_count_weights)")
    return out


def check_params_stage(params: Params) -> dict:
    """Write the marker of a valid params file. Most of the validation is :func:`~concrete_jungle.params.load_params`,
    which :func:`~concrete_jungle.cli.run_stage` has run (it raises ParamsError naming every bad or missing key);
    this stage adds the checks across sections that only a later stage would otherwise meet
    (:func:`world_probe_conflicts`).

    Raises:
        ValueError: naming every probe task the world cannot hold; nothing is written then.
    """
    from concrete_jungle.io import atomic_write

    conflicts = world_probe_conflicts(params.evaluate.probe.tasks, params.world)
    if conflicts:
        raise ValueError("the params file fails the pre-flight: " + "; ".join(conflicts))
    path = params.data_dir / "params_checked.txt"
    with atomic_write(path) as f:
        f.write(MARKER_TEXT)
    return {"profile": params.profile, "valid": True, "marker": path.as_posix()}


if __name__ == "__main__":
    run_stage(__doc__.splitlines()[0], check_params_stage)
