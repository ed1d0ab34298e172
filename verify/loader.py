"""Resolve what the user names on the command line into a ``Target``.

Accepted forms: a registered NAME, ``package.module:function`` or
``path/to/file.py:function``.  Failures raise ``TargetLoadError`` whose message
says what was wrong and what to do; the CLI turns it into exit code 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from kernels.registry import Target, get_target
from verify.capabilities import Capabilities


class TargetLoadError(Exception):
    """The target could not be found, imported or is not callable."""


def _user_caps(fn) -> Capabilities:
    caps = getattr(fn, "flashverify_capabilities", None)
    if caps is None:
        return Capabilities()
    if not isinstance(caps, Capabilities):
        raise TargetLoadError(
            f"{fn!r} has a flashverify_capabilities attribute of type {type(caps).__name__}; "
            "it must be a verify.capabilities.Capabilities"
        )
    return caps


def _from_module(module, attr: str, where: str, op: str) -> Target:
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(module) if not n.startswith("_")]
            raise TargetLoadError(
                f"{where} has no attribute {attr!r}. Public names there: {', '.join(names[:20]) or '(none)'}."
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetLoadError(f"{where}:{attr} is a {type(obj).__name__}, not a callable; point at a function.")
    try:
        inspect.signature(obj)
    except (TypeError, ValueError):
        pass
    return Target(f"{where}:{attr}", op, obj, _user_caps(obj), f"user callable {where}:{attr}", kind="user")


def load_target(spec: str, op: str) -> Target:
    """A registered name, MODULE:FUNC or PATH/FILE.py:FUNC, for ``op``."""
    if ":" not in spec or (len(spec) > 1 and spec[1] == ":" and spec.count(":") == 1):
        try:
            target = get_target(spec)
        except KeyError as e:
            raise TargetLoadError(
                f"{e.args[0]}. Name a registered target (see `python -m verify targets`), "
                "or a callable as MODULE:FUNC or PATH/FILE.py:FUNC."
            ) from None
        if target.op != op:
            raise TargetLoadError(f"target {spec!r} computes {target.op}, but --op {op} was asked for.")
        return target
    where, _, attr = spec.rpartition(":")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise TargetLoadError(f"file {where!r} does not exist (looked in {Path.cwd()}).")
        name = f"flashverify_user_{abs(hash(str(path.resolve())))}"
        mod_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:  # the user's module failed while importing
            raise TargetLoadError(f"importing {where} failed: {type(e).__name__}: {e}") from None
        return _from_module(module, attr, where, op)
    try:
        module = importlib.import_module(where)
    except Exception as e:
        raise TargetLoadError(
            f"cannot import module {where!r}: {type(e).__name__}: {e}. Is it on PYTHONPATH "
            "(run from the directory that holds it)?"
        ) from None
    return _from_module(module, attr, where, op)
