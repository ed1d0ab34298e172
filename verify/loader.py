"""Resolve what the user names on the command line into a ``Target``.

Accepted forms: a registered NAME, ``package.module:function`` or
``path/to/file.py:function``.  Failures raise ``TargetLoadError`` whose message
says what was wrong and what to do; the CLI turns it into exit code 2.

A file target is named by its absolute, resolved path (``/abs/dir/file.py:function``),
so a counterexample saved from it replays from any working directory.  A user's
callable is checked at load time against the call the engine makes (``call_shape_error``):
a callable that cannot take those arguments is a usage error, not a kernel violation.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernels.registry import Target, get_target
from verify.capabilities import Capabilities

#: How the engine calls a target of each op (``verify.engine.check_softmax_input`` /
#: ``check_attention_input``): the signature a user's callable must accept.
EXPECTED_SIGNATURES = {
    "softmax": "fn(x) -> y (x one positional tensor; softmax over its last dim)",
    "attention": "fn(q, k, v, *, scale, causal, mask) -> o (q, k, v positional; scale, causal, mask by keyword)",
}


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


def _bind_as(sig: inspect.Signature, op: str) -> None:
    """Bind placeholders in the engine's call shape for ``op``; TypeError when they do not fit."""
    if op == "softmax":
        sig.bind(None)
    else:
        sig.bind(None, None, None, scale=1.0, causal=False, mask=None)


def _a(op: str) -> str:
    return f"an {op}" if op[0] in "aeiou" else f"a {op}"


def call_shape_error(fn: Callable[..., Any], op: str) -> str | None:
    """Why ``fn`` cannot be called the way the engine calls a target of ``op`` and what to do
    (one or two sentences), else None.

    The engine calls a softmax target as ``fn(x)`` and an attention target as
    ``fn(q, k, v, scale=..., causal=..., mask=...)``; this binds those arguments to
    ``inspect.signature(fn)``.  A callable whose signature cannot be inspected (a builtin
    or C function such as ``torch.softmax``) is given the benefit of the doubt: None.
    """
    if op not in EXPECTED_SIGNATURES:
        raise ValueError(f"unknown op {op!r}; ops are {tuple(EXPECTED_SIGNATURES)}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins, C extensions: nothing to check against
        return None
    try:
        _bind_as(sig, op)
    except TypeError as e:
        message = (f"its signature is {sig}, which cannot take the call ({e}); "
                   f"{_a(op)} target is {EXPECTED_SIGNATURES[op]}.")
        other = "attention" if op == "softmax" else "softmax"
        try:
            _bind_as(sig, other)
        except TypeError:
            return message + (" Change its parameters to match (keep extra ones optional), "
                              "or wrap it in a function that does.")
        return message + f" It takes the call of {_a(other)} target: did you mean --op {other}?"
    return None


def _from_module(module, attr: str, where: str, op: str, name: str | None = None) -> Target:
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
    why = call_shape_error(obj, op)
    if why is not None:
        raise TargetLoadError(
            f"{where}:{attr} cannot be checked as {_a(op)} target: {why}"
        )
    return Target(name or f"{where}:{attr}", op, obj, _user_caps(obj), f"user callable {where}:{attr}", kind="user")


def _raised_on_import(e: BaseException, what: str) -> TargetLoadError:
    """The error for a module that exited or raised a non-``Exception`` while it was imported."""
    if isinstance(e, SystemExit):
        return TargetLoadError(
            f"{what} exited on import (SystemExit with exit code {e.code!r}): the module runs script code, "
            "such as sys.exit() or argparse, when it is imported. Guard that code with "
            "`if __name__ == \"__main__\":` so that importing the module only defines its functions."
        )
    return TargetLoadError(
        f"{what} raised {type(e).__name__} on import: {e}. Importing the module must only define its "
        "functions; guard any script code with `if __name__ == \"__main__\":`."
    )


def _load_file(where: str, attr: str, op: str) -> Target:
    path = Path(where)
    if not path.is_file():
        raise TargetLoadError(f"file {where!r} does not exist (looked in {Path.cwd()}).")
    resolved = path.resolve()
    name = f"flashverify_user_{abs(hash(str(resolved)))}"
    mod_spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    try:
        mod_spec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except Exception as e:  # the user's module failed while importing
        sys.modules.pop(name, None)
        raise TargetLoadError(f"importing {where} failed: {type(e).__name__}: {e}") from None
    except BaseException as e:  # SystemExit (sys.exit, argparse) and the like must not end the suite
        sys.modules.pop(name, None)
        raise _raised_on_import(e, where) from None
    return _from_module(module, attr, where, op, name=f"{resolved}:{attr}")


def load_target(spec: str, op: str) -> Target:
    """A registered name, MODULE:FUNC or PATH/FILE.py:FUNC, for ``op``.

    A file target's ``Target.name`` holds the file's absolute, resolved path, so an
    artifact that records it replays from any directory.  Raises ``TargetLoadError`` when
    the target is unknown, cannot be imported (its module raising, or exiting, on import),
    is not callable or cannot take the arguments the engine passes for ``op``.
    """
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
        return _load_file(where, attr, op)
    try:
        module = importlib.import_module(where)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        raise TargetLoadError(
            f"cannot import module {where!r}: {type(e).__name__}: {e}. Is it on PYTHONPATH "
            "(run from the directory that holds it)?"
        ) from None
    except BaseException as e:  # SystemExit (sys.exit, argparse) and the like must not end the suite
        raise _raised_on_import(e, f"module {where!r}") from None
    return _from_module(module, attr, where, op)
