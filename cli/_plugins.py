"""pydantic's plugin lookup, without `importlib.metadata` where no installed distribution declares a plugin.

pydantic looks for plugins (entry points of the group `pydantic`) when it builds its first model: its
`pydantic.plugin._loader` imports `importlib.metadata` (which imports the `email` package) and parses
every installed distribution's entry points, 40-50 ms of CPU in a `day0 plan` process of about 0.5 s.
`install()` puts a stand-in in that module's place: its `get_plugins()` reads the same `entry_points.txt`
files on `sys.path` for a `[pydantic]` section, about 3 ms. None found (day0 neither uses nor ships a
plugin): no plugins, what pydantic's own lookup finds then. One found, or a place that only
`importlib.metadata` can read (a zip or an egg on `sys.path`, another finder of distributions), and
for any other name asked of the module: pydantic's own module is loaded and answers from then on, so
an installed plugin still runs.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from importlib.machinery import PathFinder
from types import ModuleType

__all__ = ["install"]

_LOADER = "pydantic.plugin._loader"
_declared: bool | None = None  # whether a plugin may be installed: looked up once, as pydantic does
_stand_in = ModuleType(_LOADER, __doc__)


def _may_declare_plugins() -> bool:
    if any(getattr(f, "find_distributions", None) and f is not PathFinder for f in sys.meta_path):
        return True
    for entry in sys.path:
        root = entry or "."
        try:
            children = os.listdir(root)
        except NotADirectoryError:  # a zip
            return True
        except OSError:
            continue
        if root.lower().endswith(".egg"):
            return True
        for child in children:
            if child.lower().endswith((".dist-info", ".egg-info")):
                try:
                    with open(os.path.join(root, child, "entry_points.txt"), "rb") as fh:
                        if b"[pydantic]" in fh.read():
                            return True
                except OSError:  # no entry points
                    continue
    return False


def _pydantic_loader() -> ModuleType:
    if sys.modules.get(_LOADER) is _stand_in:
        del sys.modules[_LOADER]
    return importlib.import_module(_LOADER)


def _get_plugins() -> Iterable[object]:
    global _declared
    if _declared is None:
        _declared = _may_declare_plugins()
    return _pydantic_loader().get_plugins() if _declared else ()


def _getattr(name: str) -> object:
    if name.startswith("__"):  # what the import system probes for (__path__, ...): a plain module has none
        raise AttributeError(name)
    return getattr(_pydantic_loader(), name)


def install() -> None:
    """Put the stand-in in place, unless pydantic's own module is already loaded."""
    if _LOADER not in sys.modules:
        sys.modules[_LOADER] = _stand_in


_stand_in.get_plugins = _get_plugins  # type: ignore[attr-defined]
_stand_in.__getattr__ = _getattr  # type: ignore[method-assign]
