"""Extra estimator modules named in ``$ASYNCGRPO_ESTIMATORS``: their names, files and source fingerprint.

A plugin changes what every kernel computes, so whatever keys a result by the code that made it (Numba's
cache directory, the sweep cells' code version, a figure's provenance) must include the plugin's
source: :func:`plugin_fingerprint` is that one quantity, ``{module: sha256 of its source files}``.
Files are found without importing the modules (``importlib.util.find_spec``), so this module can run
before any kernel is compiled. Standard library only: :mod:`asyncgrpo.numba_cache` imports it first.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

#: Environment variable naming extra estimator modules (comma list), read at first import of asyncgrpo.
ENV_VAR = "ASYNCGRPO_ESTIMATORS"


def plugin_modules() -> tuple[str, ...]:
    """Module names from ``$ASYNCGRPO_ESTIMATORS`` (comma list; empty when unset)."""
    return tuple(m.strip() for m in os.environ.get(ENV_VAR, "").split(",") if m.strip())


def plugin_files(name: str) -> list[Path] | None:
    """The ``.py`` files of module ``name`` (every file of a package), or ``None`` if it cannot be found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    origin = Path(spec.origin)
    if origin.name == "__init__.py":
        return sorted(p for p in origin.parent.rglob("*.py") if "__pycache__" not in p.parts)
    return [origin]


def plugin_fingerprint(strict: bool = True) -> dict[str, str]:
    """``{module: sha256}`` over the source of every module in ``$ASYNCGRPO_ESTIMATORS`` (empty when unset).

    The digest covers each file's path inside its package and its bytes, not the folder it lives in (the
    same module copied elsewhere computes the same thing). A module that cannot be found raises
    ``ValueError`` naming it (``strict=False``: left out, for callers that run before the registry can say so).
    """
    out = {}
    for name in plugin_modules():
        files = plugin_files(name)
        if files is None:
            if strict:
                raise ValueError(f"{ENV_VAR} names module {name!r}, which cannot be found on sys.path")
            continue
        root = files[0].parent if len(files) == 1 else _package_root(files)
        h = hashlib.sha256()
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        out[name] = h.hexdigest()
    return out


def _package_root(files: list[Path]) -> Path:
    return Path(os.path.commonpath([str(f.parent) for f in files]))


__all__ = ["ENV_VAR", "plugin_modules", "plugin_files", "plugin_fingerprint"]
