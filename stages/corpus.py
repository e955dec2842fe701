"""DVC stage `corpus`: the image-caption manifest from the scene world or a real corpus (COCO, Karpathy, Flickr8k).

Writes ``data/<profile>/corpus/manifest.jsonl`` (one record per image, each with its ``split``: ``train`` or
``heldout``, :mod:`concrete_jungle.corpus.splits`) and ``metrics/<profile>/corpus.json`` (images, captions, held-out
images, skipped images counted by reason, e.g. ``image_unreadable``, and the benchmark images removed, counted per
``corpus.exclude`` source in ``excluded`` with their unique total in ``n_excluded``).
"""

from collections import Counter

from concrete_jungle.cli import fresh_dir, run_stage
from concrete_jungle.io import write_jsonl, write_metrics
from concrete_jungle.params import Params


def build_corpus(params: Params) -> dict:
    """Build the corpus manifest of ``corpus.source``.

    Benchmark images (``corpus.exclude``, and ``corpus.coco.exclude_filenames`` for the ``coco`` source) are read
    first, removed from the loaded records (:func:`concrete_jungle.corpus.splits.exclude_benchmark_images`), and the
    final records are checked against them once more (:func:`~concrete_jungle.corpus.splits.check_no_overlap`).

    Raises:
        FileNotFoundError: an exclusion source or a corpus file does not exist.
        ValueError: if the source yields no records, two records share an id, an exclusion source is malformed, or
            a benchmark image is left in the manifest (count and examples named).
    """
    from concrete_jungle.corpus import loaders, splits

    c = params.corpus
    legacy = [c.coco.exclude_filenames] if c.source == "coco" and c.coco.exclude_filenames else []
    excluded = splits.benchmark_image_ids(c.exclude, filenames=legacy)  # read (and checked) before any work
    out = fresh_dir(params.data_dir / "corpus")
    skipped: Counter = Counter()
    if c.source == "scene_world":
        from concrete_jungle.corpus.scene_world.corpus import generate_corpus

        records = generate_corpus(params.world, c.n_scenes, out, seed=params.seed, id_prefix="w")
    elif c.source == "coco":
        records = []
        for cap, img in zip(c.coco.captions, c.coco.images):
            recs, sk = loaders.load_coco_captions(cap, img)
            records += recs
            skipped.update(sk)
    elif c.source == "karpathy":
        records, sk = loaders.load_karpathy(c.karpathy.dataset_json, c.karpathy.image_root, c.karpathy.splits)
        skipped.update(sk)
    else:
        records, sk = loaders.load_flickr8k(c.flickr8k.token_file, c.flickr8k.split_file, c.flickr8k.image_dir)
        skipped.update(sk)
    n_loaded = len(records)
    records, n_by_source = splits.exclude_benchmark_images(records, excluded)
    if not records:
        raise ValueError(f"corpus source {c.source!r} produced no records (skipped: {dict(skipped)}, "
                         f"excluded benchmark images: {n_by_source})")
    ids = Counter(r["id"] for r in records)
    dup = [k for k, v in ids.items() if v > 1]
    if dup:
        raise ValueError(f"corpus has duplicate ids, e.g. {dup[:3]}")
    splits.check_no_overlap(records, excluded, f"corpus manifest ({params.profile})")  # the safety net
    records = splits.assign_splits(records, c.heldout_fraction, params.seed)
    write_jsonl(out / "manifest.jsonl", records)
    stats = {"source": c.source, "n_images": len(records),
             "n_captions": sum(len(r["captions"]) for r in records),
             "n_heldout": sum(r["split"] == "heldout" for r in records), "skipped": dict(skipped),
             "excluded": n_by_source, "n_excluded": n_loaded - len(records)}
    write_metrics(params.metrics_dir / "corpus.json", stats)
    return stats


if __name__ == "__main__":
    run_stage(__doc__, build_corpus)
