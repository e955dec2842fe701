"""DVC stage `corpus`: the image-caption manifest from the scene world or a real corpus (COCO, Karpathy, Flickr8k).

Writes ``data/<profile>/corpus/manifest.jsonl`` (one record per image) and ``metrics/<profile>/corpus.json`` (images,
captions, and skipped images counted by reason, e.g. ``image_unreadable``).
"""

from collections import Counter

from concrete_jungle.cli import fresh_dir, run_stage
from concrete_jungle.io import write_jsonl, write_metrics
from concrete_jungle.params import Params


def build_corpus(params: Params) -> dict:
    """Build the corpus manifest of ``corpus.source``.

    Raises:
        ValueError: if the source yields no records, or two records share an id.
    """
    from concrete_jungle.corpus import loaders

    out = fresh_dir(params.data_dir / "corpus")
    c = params.corpus
    skipped: Counter = Counter()
    if c.source == "scene_world":
        from concrete_jungle.corpus.scene_world.corpus import generate_corpus

        records = generate_corpus(params.world, c.n_scenes, out, seed=params.seed, id_prefix="w")
    elif c.source == "coco":
        exclude = loaders.read_filename_list(c.coco.exclude_filenames) if c.coco.exclude_filenames else None
        records = []
        for cap, img in zip(c.coco.captions, c.coco.images):
            recs, sk = loaders.load_coco_captions(cap, img, exclude_filenames=exclude)
            records += recs
            skipped.update(sk)
    elif c.source == "karpathy":
        records, sk = loaders.load_karpathy(c.karpathy.dataset_json, c.karpathy.image_root, c.karpathy.splits)
        skipped.update(sk)
    else:
        records, sk = loaders.load_flickr8k(c.flickr8k.token_file, c.flickr8k.split_file, c.flickr8k.image_dir)
        skipped.update(sk)
    if not records:
        raise ValueError(f"corpus source {c.source!r} produced no records (skipped: {dict(skipped)})")
    ids = Counter(r["id"] for r in records)
    dup = [k for k, v in ids.items() if v > 1]
    if dup:
        raise ValueError(f"corpus has duplicate ids, e.g. {dup[:3]}")
    write_jsonl(out / "manifest.jsonl", records)
    stats = {"source": c.source, "n_images": len(records),
             "n_captions": sum(len(r["captions"]) for r in records), "skipped": dict(skipped)}
    write_metrics(params.metrics_dir / "corpus.json", stats)
    return stats


if __name__ == "__main__":
    run_stage(__doc__, build_corpus)
