"""flashverify: property-based verification of softmax and attention kernels against a certified oracle.

Public interface::

    from verify import check_softmax, check_attention                     # whole searches
    from verify import assert_softmax_correct, assert_attention_correct   # one input, in your @given
    from verify import Capabilities                                       # declare what your kernel supports
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Capabilities",
    "assert_attention_correct",
    "assert_softmax_correct",
    "check_attention",
    "check_softmax",
]


def __getattr__(name: str) -> Any:
    # Imported lazily: verify's submodules are used by kernels/ and strategies/, which the
    # high-level API itself imports, so an eager import here would be circular.
    if name == "Capabilities":
        from verify.capabilities import Capabilities

        return Capabilities
    if name in __all__:
        from verify import api

        return getattr(api, name)
    raise AttributeError(f"module 'verify' has no attribute {name!r}")
