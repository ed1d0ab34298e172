"""Argument checks for the public strategies, in the manner of ``hypothesis.extra.numpy``.

Every failure raises :class:`hypothesis.errors.InvalidArgument` with a message
that names the offending argument, shows the value received and says what to
pass instead.  Checks run when the strategy is *created*, so a mistake surfaces
at the call site rather than deep inside a test run.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis.errors import InvalidArgument

from verify.capabilities import Capabilities
from verify.dtypes import FORMATS, FloatFormat, get_format


def check_argument(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgument(message)


def check_type(typ: type | tuple[type, ...], value: object, name: str) -> None:
    # bool is an int subclass; a count given as True is always a mistake.
    if isinstance(value, bool) and typ in (int, (int,)):
        raise InvalidArgument(f"{name} must be an int, not the bool {value!r}")
    if not isinstance(value, typ):
        expected = " or ".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__
        raise InvalidArgument(f"{name} must be {expected}, got {name}={value!r} (type {type(value).__name__})")


def check_positive_int(value: object, name: str) -> int:
    check_type(int, value, name)
    assert isinstance(value, int)
    check_argument(value >= 1, f"{name} must be at least 1, got {name}={value}")
    return value


def check_bool(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, got {name}={value!r}")


def check_optional_bool(value: object, name: str) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True, False or None (None: follow caps), got {name}={value!r}")


def bound_arguments(fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``fn(**kwargs)`` would receive, defaults filled in; a name ``fn`` does not
    take is an InvalidArgument."""
    try:
        bound = inspect.signature(fn).bind(**kwargs)
    except TypeError as e:
        raise InvalidArgument(f"{fn.__name__}(): {e}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def check_probe(probe: object, unavailable: dict[str, str], names: tuple[str, ...]) -> None:
    """``probe`` is None or one of ``names`` that these arguments can draw (``unavailable``
    maps the others to the reason)."""
    if probe is None:
        return
    check_argument(isinstance(probe, str) and probe in names,
                   f"probe must be None or one of {names}, got probe={probe!r}")
    assert isinstance(probe, str)
    check_argument(probe not in unavailable,
                   f"probe={probe!r} cannot be drawn with these arguments: {unavailable.get(probe)}; "
                   f"pass probe=None, or one of {tuple(n for n in names if n not in unavailable)}")


def check_caps(caps: object) -> Capabilities:
    if caps is None:
        return Capabilities()
    if not isinstance(caps, Capabilities):
        raise InvalidArgument(
            f"caps must be a verify.capabilities.Capabilities or None, got caps={caps!r} "
            f"(type {type(caps).__name__})"
        )
    return caps


def resolve_dtypes(dtypes: object, caps: Capabilities) -> tuple[FloatFormat, ...]:
    """Canonical formats of ``dtypes`` that ``caps`` supports, in the caller's order.

    The caller's order is kept because shrinking moves towards the first entry:
    put the dtype you want counterexamples reported in first.
    """
    if isinstance(dtypes, (str, torch.dtype)):
        raise InvalidArgument(
            f"dtypes must be a sequence of dtype names, e.g. dtypes=({dtypes!r},), not the single value {dtypes!r}"
        )
    if not isinstance(dtypes, Sequence) or len(dtypes) == 0:
        raise InvalidArgument(f"dtypes must be a non-empty sequence of dtype names from {tuple(FORMATS)}, got {dtypes!r}")
    formats: list[FloatFormat] = []
    for entry in dtypes:
        try:
            fmt = get_format(entry)
        except ValueError as err:
            raise InvalidArgument(f"dtypes contains {entry!r}: {err}") from None
        if fmt.name not in FORMATS:
            raise InvalidArgument(
                f"dtypes contains {entry!r}, a compute precision rather than a storage dtype; "
                f"use one of {tuple(FORMATS)}"
            )
        if fmt not in formats:
            formats.append(fmt)
    supported = [f for f in formats if caps.supports_dtype(f.name)]
    if not supported:
        raise InvalidArgument(
            f"none of dtypes={tuple(f.name for f in formats)} is supported by the target "
            f"(caps.dtypes={caps.dtypes}); pass dtypes that appear in caps.dtypes"
        )
    return tuple(supported)


def resolve_switch(requested: bool | None, allowed: bool, name: str, caps_field: str) -> bool:
    """``None`` follows the capability; ``True`` against a capability that forbids it is an error."""
    check_optional_bool(requested, name)
    if requested is None:
        return allowed
    if requested and not allowed:
        raise InvalidArgument(
            f"{name}=True but the target declares caps.{caps_field}=False; "
            f"pass {name}=None or False, or declare the capability"
        )
    return requested


def length_bounds(max_value: int, name: str, caps: Capabilities) -> tuple[int, int]:
    """The inclusive range of lengths allowed by both ``max_value`` and ``caps``."""
    check_positive_int(max_value, name)
    lo = caps.min_length
    hi = max_value if caps.max_length is None else min(max_value, caps.max_length)
    check_argument(
        lo <= hi,
        f"{name}={max_value} is below the target's caps.min_length={caps.min_length}; "
        f"raise {name} to at least {caps.min_length}",
    )
    return lo, hi


def spec_error(kind: str, message: str, value: Any = None) -> ValueError:
    """Errors in a stored spec (from_dict / constructor) are ValueErrors: data, not arguments."""
    suffix = "" if value is None else f" (got {value!r})"
    return ValueError(f"invalid {kind}: {message}{suffix}")


def reject_extra_keys(d: dict[str, Any]) -> dict[str, Any]:
    """What is left of a spec dict after its known keys were popped must be nothing."""
    if d:
        raise spec_error("spec", f"unknown keys {sorted(d)}")
    return {}
