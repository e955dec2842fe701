"""DVC stage `shards` (``train.data_format: webdataset``, issue 21): the fine-tunes' inputs as WebDataset tar
shards (:mod:`concrete_jungle.shards`), the field's training format at scale.

Writes ``data/<p>/shards/<dataset>/`` for each ConcreteBatch of ``train.datasets`` (anchor image and caption, hard-
negative image and caption, keyword, type, c_i) and, when ``train.baselines`` is not empty,
``data/<p>/shards/anchors/`` (the corpus' training anchors in open_clip's own layout, read by ``clip``), each
``train.samples_per_shard`` samples a shard in record order, with an ``index.json`` of counts and SHA-256; the same
records give byte-identical shards on any machine. The train stages then stream them (``ShardStream``).
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import read_jsonl
from concrete_jungle.params import Params


def shards_stage(params: Params) -> dict:
    """Write the shards; returns ``{folder name: {"samples", "shards"}}``.

    Raises:
        ValueError: a record the shards cannot hold (a key written twice, a missing caption or image field, an
            image suffix WebDataset has no extension for; :func:`concrete_jungle.shards.write_shards` names it).
        OSError: an image file that cannot be read (named).
    """
    from concrete_jungle.corpus.splits import training_records
    from concrete_jungle.shards import write_shards

    out = params.data_dir / "shards"
    n = params.train.samples_per_shard
    inputs = {d: ("concretebatch", params.data_dir / "concreteplant" / d / "concretebatch.jsonl")
              for d in params.train.datasets}
    if params.train.baselines:
        inputs["anchors"] = ("anchors", params.data_dir / "corpus" / "manifest.jsonl")
    clear_outputs(*(out / name for name in inputs))  # one DVC output a folder: a train stage reads only its own
    result = {}
    for name, (kind, source) in inputs.items():
        records = read_jsonl(source)
        if kind == "anchors":
            records = training_records(records)
        try:
            index = write_shards(records, out / name, kind, n)
        except ValueError as err:
            raise ValueError(f"{err}, from {source}") from None
        result[name] = {"samples": index["samples"], "shards": len(index["shards"])}
    return result


if __name__ == "__main__":
    run_stage(__doc__, shards_stage)
