"""What code a DVC stage runs: the import closure of its script, and the data files and folders that code reads.

Used by :mod:`concrete_jungle.lineage` to write every stage's code dependencies from the source, never by hand.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from concrete_jungle.params import Params

REPO = Path(__file__).resolve().parents[2]
_PACKAGES = ("concrete_jungle", "analysis")  # project code: src/concrete_jungle and analysis/ at the root


def _roots(repo: Path) -> dict[str, Path]:
    return {"concrete_jungle": repo / "src", "analysis": repo}


def _module_file(module: str, repo: Path) -> Path | None:
    parts = module.split(".")
    root = _roots(repo).get(parts[0])
    if root is None:
        return None
    base = root.joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


_IMPORTS: dict[tuple[str, int, int], frozenset[str]] = {}  # (path, mtime_ns, size) -> its project imports


def _imports(path: Path) -> set[str]:
    """Dotted names of every ``concrete_jungle`` / ``analysis`` module ``path`` imports, anywhere in the file
    (``from a.b import c`` yields ``a.b`` and, when it is a module, ``a.b.c``). Parsed once per file version (the
    spec renders ~300 stages over the same ~100 modules)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _IMPORTS:
        _IMPORTS[key] = frozenset(_parse_imports(path))
    return set(_IMPORTS[key])


def _parse_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] in _PACKAGES}


def code_deps(script: str | Path, repo: Path = REPO) -> list[str]:
    """Repository-relative paths of the code ``script`` runs: itself, every project module in its import closure
    with the ``__init__.py`` of their parent packages, and the data folders those modules read (sorted).

    Raises:
        FileNotFoundError: ``script`` does not exist.
    """
    script = repo / script
    if not script.is_file():
        raise FileNotFoundError(f"stage script not found: {script}")
    key = (str(script), str(repo))
    if key in _CLOSURES and _CLOSURES[key][0] == _stamps(_CLOSURES[key][2]):
        return list(_CLOSURES[key][1])
    deps, seen = _walk(script, repo)
    _CLOSURES[key] = (_stamps(seen), deps, seen)
    return list(deps)


# (script, repo) -> (stamps of its closure's files and their folders, deps, closure): the spec renders ~600
# stages over ~30 scripts; a closure is walked again only when one of its files or folders changed
_CLOSURES: dict[tuple[str, str], tuple[tuple, list[str], frozenset[Path]]] = {}


def _stamps(files) -> tuple:
    """(path, mtime_ns, size) of the closure's ``files``, and mtime_ns of the folders :func:`_walk` looks in for
    them (each file's folder and its parent: modules, data files and data folders are found there; adding or
    removing one changes that folder's mtime); a missing file or folder stamps as None."""
    out = []
    for f in sorted({*files, *(f.parent for f in files), *(f.parent.parent for f in files)}):
        try:
            st = f.stat()
            out.append((str(f), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(f), None))
    return tuple(out)


def _walk(script: Path, repo: Path) -> tuple[list[str], frozenset[Path]]:
    """The sorted deps of :func:`code_deps` and the set of module files of the closure."""
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imports(path):
            parts = module.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
                f = _module_file(".".join(parts[:i]), repo)
                if f is not None and f not in seen:
                    todo.append(f)
    deps = {p.relative_to(repo).as_posix() for p in seen}
    package = repo / "src" / "concrete_jungle"
    package_dirs = {d for d in package.rglob("*") if d.is_dir()} | {package}
    for p in seen:  # data files of a package in the closure (e.g. concreteplant/lexicon/*.yaml)
        if p.name == "__init__.py":
            deps |= {f.relative_to(repo).as_posix() for f in p.parent.iterdir()
                     if f.is_file() and f.suffix not in (".py", ".pyc") and not f.name.startswith(".")}
    for p in seen:  # data folders a module names (e.g. models/build.py -> ../model_configs)
        text = p.read_text()
        for folder in {p.parent, p.parent.parent} & package_dirs:
            for d in folder.iterdir():
                if d.is_dir() and not any(d.glob("*.py")) and not d.name.startswith((".", "_")) \
                        and f'"{d.name}"' in text:
                    deps.add(d.relative_to(repo).as_posix())
    return sorted(deps), frozenset(seen)


#: The folder of shipped open_clip configs (``models/build.py`` registers every file in it).
MODEL_CONFIG_DIR = "src/concrete_jungle/model_configs"


def model_config_deps(deps: list[str], profiles: list[Params], repo: Path = REPO) -> list[str]:
    """``deps`` with the shipped-config folder (:data:`MODEL_CONFIG_DIR`, found by :func:`code_deps`) replaced by
    the config files the ``profiles`` name (any params value equal to a config's file stem, e.g.
    ``base_model.model.name: cj-world-vit``), so that adding or editing another profile's config stales no
    stage of this one. A profile naming no shipped config (the paper's ``ViT-B-32-quickgelu``) keeps none. Sorted."""
    if MODEL_CONFIG_DIR not in deps:
        return deps
    stems = {f.stem for f in (repo / MODEL_CONFIG_DIR).glob("*.json")}
    named: set[str] = set()

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)
        elif isinstance(obj, str) and obj in stems:
            named.add(obj)

    for p in profiles:
        walk(p.model_dump())
    return sorted({*(d for d in deps if d != MODEL_CONFIG_DIR), *(f"{MODEL_CONFIG_DIR}/{n}.json" for n in named)})
