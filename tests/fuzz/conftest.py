"""Nightly fuzz plumbing: a Redis example database for the nightly profile, and corpus capture.

* ``FLASHVERIFY_DB=redis://...`` re-registers the ``nightly`` profile with a
  ``RedisExampleDatabase`` (needs the ``redis`` package; the root conftest only knows
  directory databases).
* ``FLASHVERIFY_CORPUS=DIR``: every failing property's final (shrunk) counterexample is
  written to DIR as a regression corpus file (see ``verify.fuzz``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

_db = os.environ.get("FLASHVERIFY_DB", "")
if _db.startswith(("redis://", "rediss://")):
    import redis
    from hypothesis.extra.redis import RedisExampleDatabase

    settings.register_profile(
        "nightly", max_examples=20_000, deadline=None,
        database=RedisExampleDatabase(redis.Redis.from_url(_db)),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    corpus = os.environ.get("FLASHVERIFY_CORPUS")
    if not corpus or report.when != "call" or not report.failed:
        return
    from verify.fuzz import corpus_entry, write_corpus_entry

    text = str(report.longrepr)
    marks = [line.split("FLASHVERIFY-CORPUS ", 1)[1] for line in text.splitlines() if "FLASHVERIFY-CORPUS " in line]
    if not marks:
        return
    try:
        d = json.loads(marks[-1].strip().rstrip("'\""))
    except ValueError:
        return
    write_corpus_entry(corpus_entry(d["target"], d["spec"], d["violation"], d.get("description", ""),
                                    dtype=d.get("dtype"), expect=d.get("expect")), Path(corpus))
