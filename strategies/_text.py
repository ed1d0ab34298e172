"""Short, readable renderings of numbers and dtypes for ``describe()``."""

from __future__ import annotations

import math
from typing import Any

from verify.capabilities import Capabilities

SHORT_DTYPE = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
    "float8_e4m3fn": "e4m3",
    "float8_e5m2": "e5m2",
}


def num(x: float) -> str:
    """``30000.0`` -> ``3e4``; ``0.5`` -> ``0.5``; three significant digits at most."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    text = format(x, ".3g")
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else text


def short_dtype(name: str) -> str:
    return SHORT_DTYPE.get(name, name)


def call_text(name: str, caps: Capabilities, **kwargs: Any) -> str:
    """How a strategy factory was called, shown as the strategy's repr in Hypothesis output."""
    shown = [f"{k}={v!r}" for k, v in kwargs.items()]
    if caps != Capabilities():
        changed = {k: v for k, v in caps.to_dict().items() if v != Capabilities().to_dict()[k]}
        shown.append("caps=Capabilities(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ")")
    return f"{name}({', '.join(shown)})"


class ReplayableRepr:
    """repr() of a case is the call that rebuilds it, so a printed counterexample can be pasted back."""

    def __repr__(self) -> str:
        return f"case_from_dict({self.spec.to_dict()!r})"

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        # Hypothesis pretty-prints dataclasses field by field unless told otherwise.
        printer.text(repr(self))
