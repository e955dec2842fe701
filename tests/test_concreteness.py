"""Brysbaert (2014) concreteness table: published values, agreement with the original file, NA-word traps."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from concrete_jungle.concreteness import (
    ConcretenessTable,
    load_concreteness,
    normalize_key,
    read_brysbaert_original,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ORIGINAL = SHARED / "concreteness" / "Concreteness_ratings_Brysbaert_et_al_BRM.txt"

# Conc.M as printed in the original file (grep'd rows: "banana\t0\t5\t...", "fire hydrant\t1\t4.85\t...").
PUBLISHED = {
    "banana": 5.00,
    "dog": 4.85,
    "red": 4.24,
    "under": 3.45,
    "idea": 1.61,
    "fire hydrant": 4.85,
    "coffee cup": 5.00,
}


def _original() -> dict[str, float]:
    if not ORIGINAL.exists():
        pytest.skip(f"original Brysbaert file absent ({ORIGINAL}); ../shared/data is not beside the repo")
    return read_brysbaert_original(ORIGINAL)


@pytest.fixture(scope="module")
def table() -> ConcretenessTable:
    return load_concreteness()


def test_published_values(table):
    for word, value in PUBLISHED.items():
        assert table.lookup(word) == pytest.approx(value, abs=1e-9), word


def test_published_values_match_original_file():
    orig = _original()
    for word, value in PUBLISHED.items():
        assert orig[word] == pytest.approx(value, abs=1e-9), word


def test_lookup_normalises_case_and_spaces(table):
    assert table.lookup("Fire  Hydrant ") == pytest.approx(4.85)
    assert table.lookup("BANANA") == pytest.approx(5.0)
    assert "Coffee cup" in table
    assert "fire_hydrant" not in table
    assert table.lookup("xqzvword") is None
    assert 3 not in table  # non-str membership is False, not an error


def test_lookup_rejects_non_string(table):
    with pytest.raises(TypeError, match="must be a str"):
        table.lookup(None)  # type: ignore[arg-type]


def test_size_and_bigram_count(table):
    assert len(table) == 39954
    assert sum(" " in k for k in table) == 2896  # the paper's 2,896 two-word expressions
    assert load_concreteness() is table  # cached


def test_na_like_words_survive(table):
    # A default pandas read turns the word "null" into NaN; our readers keep it (and "true"/"false"/"none").
    assert table.lookup("null") == pytest.approx(1.79)
    assert table.lookup("true") == pytest.approx(1.70)
    assert table.lookup("false") == pytest.approx(2.36)
    assert table.lookup("none") == pytest.approx(2.59)
    assert table.lookup("nan") is None  # not a word of the norm


def test_default_pandas_reading_would_lose_null():
    """Documents the trap the readers avoid: default NA parsing drops the word 'null'."""
    orig = _original()
    df = pd.read_csv(ORIGINAL, sep="\t")
    assert df["Word"].isna().sum() == 1
    assert "null" in orig and len(orig) == 39954


def test_table_agrees_with_original_file(table):
    orig = _original()
    assert len(orig) == 39954
    lowered = {normalize_key(k): v for k, v in orig.items()}
    assert len(lowered) == 39954  # no collisions after lower-casing ("I", "ID card", "ZIP code", ...)
    assert set(lowered) == set(table)
    mismatches = [k for k, v in lowered.items() if abs(table[k] - v) > 1e-9]
    assert mismatches == []


def test_table_validation_errors():
    with pytest.raises(ValueError, match="outside"):
        ConcretenessTable({"x": 5.5})
    with pytest.raises(ValueError, match="not a number"):
        ConcretenessTable({"x": "abc"})
    with pytest.raises(ValueError, match="collides"):
        ConcretenessTable({"Dog": 4.0, "dog": 3.0})
    with pytest.raises(FileNotFoundError, match="not found"):
        read_brysbaert_original("/nonexistent/ratings.txt")
