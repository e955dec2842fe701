"""Word lists of the lexical rewriter (:mod:`~concrete_jungle.concreteplant.lexical`): data files and reader.

The ``*.yaml`` files of this package hold the hand lists (kinds, opposites, directed and context substitutes,
verbs and participles, morphology exceptions, WordNet stopwords); each file's header says what it holds and
which module constant it becomes. :class:`LexiconFile` reads one with YAML's base schema, so every scalar is
a string ("on", "no", "2" stay words), and checks the shape of each entry it is asked for;
:func:`lexicon_file` reads a packaged file once, through ``importlib.resources``.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any, NoReturn

import yaml

__all__ = ["LexiconFile", "lexicon_file"]


class _LexiconLoader(getattr(yaml, "CBaseLoader", yaml.BaseLoader)):
    """YAML's base schema (every scalar is a string: "on", "no", "2" stay words) that rejects a repeated key."""

    def construct_mapping(self, node, deep=False):
        seen: set[str] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"repeated key {key.value!r}",
                                                            key.start_mark)
                seen.add(key.value)
        return super().construct_mapping(node, deep)


class LexiconFile:
    """One lexicon data file (``lexicon/*.yaml``): a YAML mapping read with the base schema, so every scalar is a
    string ("on", "no", "2" stay words). The accessors take a key (dotted when nested: ``"participles.with"``),
    check the shape of its value and name the file and the key in their errors.

    Args:
        path: a path, or an ``importlib.resources`` Traversable (the packaged files).

    Raises:
        FileNotFoundError: naming ``path`` when the file does not exist.
        ValueError: naming ``path`` when it is not valid YAML (with the line), repeats a key of a mapping, or
            its top level is not a mapping.
    """

    def __init__(self, path: str | os.PathLike | Any) -> None:
        self.path = path
        try:
            text = (Path(path) if isinstance(path, (str, os.PathLike)) else path).read_text(encoding="utf-8")
            self.data: dict[str, Any] = yaml.load(text, Loader=_LexiconLoader)
        except FileNotFoundError:
            raise FileNotFoundError(f"lexicon file {path} is missing (package data of concrete_jungle)") from None
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            what = ", ".join(filter(None, (getattr(err, "context", None), getattr(err, "problem", None))))
            raise ValueError(f"lexicon file {path} is not valid YAML{at}: {what or err}") from None
        if not isinstance(self.data, dict):
            raise ValueError(f"lexicon file {path}: the top level must be a mapping, got {self.data!r:.80}")

    def _fail(self, key: str, what: str, value: Any) -> NoReturn:
        raise ValueError(f"lexicon file {self.path}: {key!r} must be {what}, got {value!r:.200}")

    def _get(self, key: str) -> Any:
        value: Any = self.data
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ValueError(f"lexicon file {self.path}: missing key {key!r}")
            value = value[part]
        return value

    def _as_words(self, key: str, value: Any) -> tuple[str, ...]:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(isinstance(w, str) and w.strip() for w in items):
            self._fail(key, "a word or a non-empty list of words", value)
        return tuple(items)

    def words(self, key: str, allowed: Collection[str] | None = None) -> tuple[str, ...]:
        """The words under ``key``, in file order.

        Returns:
            a tuple of non-empty strings (a single word in the file gives a 1-tuple).

        Raises:
            ValueError: naming the file and ``key`` when the key is missing, its value is not a word or a
                non-empty list of words, or it lists a word outside ``allowed`` (when given, e.g. the kind names).
        """
        words = self._as_words(key, self._get(key))
        unknown = [w for w in words if allowed is not None and w not in allowed]
        if unknown:
            self._fail(key, "a list of known names", unknown)
        return words

    def word_lists(self, key: str, size: int | None = None) -> dict[str, tuple[str, ...]]:
        """The mapping under ``key``: word (or kind) -> its words (``small: [large, big]``), in file order.

        Returns:
            a dict of str -> tuple of non-empty strings (a single word in the file gives a 1-tuple).

        Raises:
            ValueError: naming the file and the key (``key.entry`` for one entry) when the key is missing or not
                a mapping, or an entry is not a word or a non-empty list of words, or (``size`` given) does not
                list ``size`` words.
        """
        table = self._get(key)
        if not isinstance(table, dict) or not all(name.strip() for name in table):
            self._fail(key, "a mapping of words to word lists", table)
        out = {name: self._as_words(f"{key}.{name}", value) for name, value in table.items()}
        for name, words in out.items():
            if size is not None and len(words) != size:
                self._fail(f"{key}.{name}", f"a list of {size} words", table[name])
        return out

    def word_map(self, key: str) -> dict[str, str]:
        """The mapping under ``key``: word -> one word (``knife: knives``), in file order.

        Returns:
            a dict of str -> str.

        Raises:
            ValueError: as :meth:`word_lists` with ``size=1``.
        """
        return {name: words[0] for name, words in self.word_lists(key, size=1).items()}


@functools.cache
def lexicon_file(name: str) -> LexiconFile:
    """The packaged data file ``lexicon/<name>`` (through ``importlib.resources``, so an installed wheel works),
    parsed once.

    Returns:
        the :class:`LexiconFile`.

    Raises:
        FileNotFoundError / ValueError: as :class:`LexiconFile`.
    """
    return LexiconFile(importlib.resources.files(__name__) / name)
