"""Run unmodified Ryu apps on os-ken: ``ryu.*`` imports resolve to ``os_ken.*``.

Ryu 4.34 does not run on Python >= 3.10; os-ken, its maintained fork, has the same API
under another package name, and the fork also renamed the names that spelled the
project's name: ``RyuApp`` is ``OSKenApp``, ``RyuException`` is ``OSKenException``,
``RyuBGPSpeaker`` is ``OSKenBGPSpeaker``, ``ofp_ofctl_field_name_to_ryu`` is
``ofp_ofctl_field_name_to_os_ken``. A module alias alone is not enough (``from
ryu.base.app_manager import RyuApp`` fails on os-ken's module), so :func:`install` puts
a meta-path finder in front of the import system that

- answers an import of ``ryu`` or ``ryu.X.Y`` with os-ken's module ``os_ken.X.Y`` (the
  very same module object, so os-ken's registries and ``isinstance`` keep working), and
- gives every os-ken module, loaded before or after, the Ryu spelling of its renamed
  names (:func:`ryu_name`), next to the os-ken one. Only names are added; nothing of
  os-ken's is replaced.

Only the launcher calls :func:`install`, for ``routing.policy = "app"``; the built-in
policies never see it. A ``ryu`` module os-ken does not have (Ryu's sample apps, its
``ryu-manager`` command, ...) fails with :class:`RyuCompatError` naming the module;
:func:`load_app` turns a Ryu name os-ken lacks into the same error naming the name.

No os-ken import at module level: unit tests of the mapping itself stay cheap.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import re
import sys
import types
from pathlib import Path

RYU = "ryu"
OS_KEN = "os_ken"
# os-ken's spelling -> Ryu's, longest first; applied once each, left to right.
_SPELLINGS = (("OSKEN", "RYU"), ("OSKen", "Ryu"), ("os_ken", "ryu"), ("osken", "ryu"))
_RENAMED = re.compile("|".join(os_ken for os_ken, _ in _SPELLINGS))
# Packages Ryu had and os-ken dropped, and what to do instead (used in error messages).
_DROPPED = {
    "ryu.cmd": "os-ken ships no ryu-manager: incastlab's launcher starts the apps",
    "ryu.app": "of Ryu's apps os-ken keeps only ryu.app.ofctl (no sample apps, no wsgi/REST): "
               "copy a sample app's file next to yours and list it in routing.app",
}


class RyuCompatError(ImportError):
    """A ``ryu`` module or name has no os-ken counterpart; the message names it."""


def ryu_name(name: str) -> str:
    """The Ryu spelling of an os-ken name (``OSKenApp`` -> ``RyuApp``); a name that
    does not spell os-ken is returned unchanged."""
    table = dict(_SPELLINGS)
    return _RENAMED.sub(lambda m: table[m.group(0)], name)


def os_ken_name(ryu: str) -> str:
    """The os-ken spelling of a Ryu name (``RyuApp`` -> ``OSKenApp``), the inverse of
    :func:`ryu_name` for the names os-ken renamed."""
    table = {"RYU": "OSKEN", "Ryu": "OSKen", "ryu": "os_ken"}  # os-ken's usual spellings
    return re.sub("RYU|Ryu|ryu", lambda m: table[m.group(0)], ryu)


def os_ken_module(ryu_module: str) -> str:
    """``ryu.lib.packet`` -> ``os_ken.lib.packet``; ValueError for a non-ryu name."""
    if ryu_module != RYU and not ryu_module.startswith(RYU + "."):
        raise ValueError(f"{ryu_module!r} is not a ryu module")
    return OS_KEN + ryu_module[len(RYU):]


def add_ryu_names(module: types.ModuleType) -> list[str]:
    """Give ``module`` the Ryu spelling of each of its os-ken-spelled names; return the
    names added. A name the module already has is left alone."""
    added = []
    for name, value in list(vars(module).items()):
        if not _RENAMED.search(name) or name.startswith("__"):
            continue
        alias = ryu_name(name)
        if alias not in vars(module):
            setattr(module, alias, value)
            added.append(alias)
    return added


def _add_ryu_names_everywhere() -> None:
    for name, module in list(sys.modules.items()):
        if (name == OS_KEN or name.startswith(OS_KEN + ".")) and module is not None \
                and not getattr(module, "__incastlab_ryu_names__", False):
            add_ryu_names(module)
            try:
                module.__incastlab_ryu_names__ = True
            except AttributeError:  # a module object that refuses attributes
                pass


def _dropped_hint(fullname: str) -> str:
    for prefix, hint in _DROPPED.items():
        if fullname == prefix or fullname.startswith(prefix + "."):
            return f" ({hint})"
    return ""


class _AliasLoader(importlib.abc.Loader):
    """Hands out os-ken's module object as the ryu module."""

    def __init__(self, target: str):
        self.target = target
        self._own_spec = None

    def create_module(self, spec):
        try:
            module = importlib.import_module(self.target)
        except RyuCompatError:
            raise
        except ImportError as exc:  # e.g. an optional dependency os-ken's module needs
            raise RyuCompatError(f"cannot import {spec.name!r}: os-ken's module "
                                 f"{self.target!r} failed to import: {exc}",
                                 name=spec.name) from exc
        # Modules that were imported on the way (os-ken imports its own dependencies)
        # get their Ryu names before the app can reach them through ``from ryu import``.
        _add_ryu_names_everywhere()
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module):
        # Already executed under its own name. The import system has just set the
        # module's __spec__ to the ryu one: put os-ken's back, so that os-ken's own
        # relative imports and reloads keep seeing their real package.
        module.__spec__ = self._own_spec


class _NamingLoader(importlib.abc.Loader):
    """Wraps the loader of an os-ken module: once the module has run, it gets its Ryu
    names. Everything else is the real loader's."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        add_ryu_names(module)

    def __getattr__(self, name):  # get_source, get_resource_reader, is_package, ...
        return getattr(self._loader, name)


class RyuAliasFinder(importlib.abc.MetaPathFinder):
    """Meta-path finder for ``ryu`` and ``ryu.*`` (see the module docstring), which also
    names every os-ken module loaded after it: ``from ryu.base import app_manager``
    imports ``os_ken.base.app_manager`` under that name (the import system builds a
    from-import's submodule name from the parent module's own name), never asking
    for a ``ryu`` name."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(OS_KEN + "."):
            return self._os_ken_spec(fullname, path, target)
        if fullname != RYU and not fullname.startswith(RYU + "."):
            return None
        real = os_ken_module(fullname)
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (real == exc.name or real.startswith(exc.name + ".")):
                raise RyuCompatError(f"cannot import {fullname!r}: os-ken's {real!r} failed "
                                     f"to import: {exc}", name=fullname) from exc
            found = None  # a parent of the target does not exist either
        except ImportError as exc:  # the target's parent package failed to import
            raise RyuCompatError(f"cannot import {fullname!r}: os-ken's {real!r} failed to "
                                 f"import: {exc}", name=fullname) from exc
        if found is None:
            raise RyuCompatError(
                f"cannot import {fullname!r}: os-ken has no module {real!r} to stand in "
                f"for it{_dropped_hint(fullname)}", name=fullname)
        is_package = found.submodule_search_locations is not None
        spec = importlib.util.spec_from_loader(fullname, _AliasLoader(real),
                                               is_package=is_package)
        if is_package:
            spec.submodule_search_locations = list(found.submodule_search_locations)
        return spec


    def _os_ken_spec(self, fullname, path, target):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _NamingLoader(spec.loader)
                return spec
        return None


def install() -> RyuAliasFinder:
    """Put the finder first on ``sys.meta_path`` (once) and give already-loaded os-ken
    modules their Ryu names. Returns the installed finder."""
    for finder in sys.meta_path:
        if isinstance(finder, RyuAliasFinder):
            return finder
    if RYU in sys.modules and not isinstance(sys.modules[RYU], types.ModuleType):
        raise RyuCompatError("sys.modules['ryu'] is not a module")
    real_ryu = sys.modules.get(RYU)
    if real_ryu is not None and getattr(real_ryu, "__name__", RYU) == RYU:
        raise RyuCompatError("a real 'ryu' package is already imported in this process; "
                             "the os-ken alias cannot take its place")
    finder = RyuAliasFinder()
    sys.meta_path.insert(0, finder)
    _add_ryu_names_everywhere()
    return finder


def uninstall() -> None:
    """Remove the finder and the ``ryu`` entries of ``sys.modules`` (tests). The Ryu
    names added to os-ken modules stay: they are plain extra references."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, RyuAliasFinder)]
    for name in [n for n in sys.modules if n == RYU or n.startswith(RYU + ".")]:
        del sys.modules[name]


_MISSING_NAME = re.compile(r"cannot import name '([^']+)' from '([^']+)'")
_MISSING_ATTR = re.compile(r"module '([^']+)' has no attribute '([^']+)'")


def explain(exc: BaseException, app: str) -> str | None:
    """A clear message when ``exc`` (raised while importing ``app``) is an os-ken
    module lacking a name the app asked for through ``ryu``; None for anything else."""
    if isinstance(exc, RyuCompatError):
        return f"app {app}: {exc}"
    text = str(exc)
    m = _MISSING_NAME.search(text) if isinstance(exc, ImportError) else None
    if m:
        name, module = m.groups()
    else:
        m = _MISSING_ATTR.search(text) if isinstance(exc, AttributeError) else None
        if not m:
            return None
        module, name = m.groups()
    if module != OS_KEN and not module.startswith(OS_KEN + "."):
        return None
    ryu_module = RYU + module[len(OS_KEN):]
    tried = {name, os_ken_name(name)}
    return (f"app {app}: cannot map {ryu_module}.{name}: os-ken's {module} has no "
            f"{' and no '.join(repr(n) for n in sorted(tried, reverse=True))}"
            f"{_dropped_hint(f'{ryu_module}.{name}')}")


def load_app(app: str) -> types.ModuleType:
    """Import one app, a ``.py`` file or a dotted module name, with the alias installed.
    A file is imported once, as ryu-manager does (its directory on ``sys.path`` while it
    loads, module name = file name), under a name that shadows no other module; pass
    the returned module's ``__name__`` to ``AppManager.run_apps``. Raises
    RyuCompatError naming the ryu module or name that cannot be mapped; other errors of
    the app propagate unchanged."""
    install()
    try:
        if app.endswith(".py"):
            module = _import_file(Path(app).resolve())
        else:
            module = importlib.import_module(app)
    except (ImportError, AttributeError) as exc:
        message = explain(exc, app)
        if message is None:
            raise
        raise RyuCompatError(message) from exc
    _add_ryu_names_everywhere()
    return module


def _import_file(path: Path) -> types.ModuleType:
    base = re.sub(r"\W", "_", path.stem) or "app"
    if base[0].isdigit():
        base = "_" + base
    name, n = base, 1
    while name in sys.modules or importlib.util.find_spec(name) is not None:
        n += 1
        name = f"{base}_{n}"  # never shadow a real module (an app named json.py)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    sys.path.append(str(path.parent))  # its sibling modules, as ryu-manager allows
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path[:] = saved
    return module
