"""DVC stage `keywords`: parse every anchor caption once with spaCy and mine its keyword candidates with their
Brysbaert concreteness (paper Sec. 2.2, A.1), for all ConcreteBatch datasets (D_hc, D_lc and D_wo sample from the
same candidates; the 77-token context rule is applied by ConcretePlant at ``concreteplant.context_length``).

Writes ``data/<profile>/keywords/candidates.jsonl`` (one line per manifest record, in manifest order:
``{"id", "candidates": [[text, lemma, type, start, end, concreteness], ...]}``) and ``metrics/<profile>/keywords.json``.
"""

from concrete_jungle.cli import clear_outputs, run_stage
from concrete_jungle.io import read_jsonl, write_jsonl, write_metrics
from concrete_jungle.params import Params


def mine_anchor_keywords(params: Params) -> dict:
    """Candidates of every manifest anchor (:func:`~concrete_jungle.concreteplant.keywords.mine_keywords` without
    the context rule).

    Raises:
        ValueError: an empty manifest.
    """
    from collections import Counter

    from concrete_jungle.concreteplant.keywords import MiningStats, candidate_to_row, load_spacy, mine_keywords

    cp = params.concreteplant
    records = read_jsonl(params.data_dir / "corpus" / "manifest.jsonl")
    if not records:
        raise ValueError("keywords: the corpus manifest is empty")
    out = params.data_dir / "keywords" / "candidates.jsonl"
    metrics = params.metrics_dir / "keywords.json"
    clear_outputs(out, metrics)
    stats = MiningStats()
    candidates = mine_keywords([r["anchor"] for r in records], nlp=load_spacy(cp.spacy_model),
                               batch_size=cp.batch_size, context_length=None, stats=stats)
    write_jsonl(out, ({"id": r["id"], "candidates": [candidate_to_row(c) for c in cands]}
                      for r, cands in zip(records, candidates)))
    types = Counter(c.type for cands in candidates for c in cands)
    result = {"captions": stats.captions, "candidates": stats.candidates,
              "rated": sum(c.rated for cands in candidates for c in cands),
              "without_rated_candidate": sum(not any(c.rated for c in cands) for cands in candidates),
              "by_type": dict(sorted(types.items()))}
    write_metrics(metrics, result)
    return result


if __name__ == "__main__":
    run_stage(__doc__, mine_anchor_keywords)
