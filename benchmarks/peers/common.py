"""What every peer runner shares: the workload's parameters, the run loop and its record.

Standard library only: each runner runs in its library's own virtual environment, which
need not have privsql, DuckDB or NumPy. A runner gives a ``load`` (read the Parquet file
into the library's in-memory form) and one :class:`Contender` per line of the table, whose
``release`` makes one DP answer from the loaded data (``{group: (count, sum)}``);
:func:`run` times them and prints one JSON record per contender on stdout. Peak memory is
taken by the driver, which sees the whole process tree (Spark's JVM is a child process).
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

EPSILON = 1.0
"""Total ε of one release, spent on the two statistics together."""
ROWS_PER_GROUP = 10
"""Rows one unit may contribute to one group (``BOUND ROWS 10``)."""
MAX_GROUPS = 50
"""Groups one unit may contribute to (``MAX_GROUPS 50``)."""
LOW, HIGH = 0.0, 100.0
"""Clamp bounds of the summed value ``v``."""
GROUPS = 50
"""The public group keys are ``0 .. GROUPS - 1``."""
KEYS = list(range(GROUPS))

Answer = dict[int, tuple[float, float]]
"""One release: group key -> (noisy count, noisy sum of clamped v)."""


def arguments(extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The runner's command line: the Parquet file, the number of releases, and load repeats."""
    parser = argparse.ArgumentParser()
    parser.add_argument("parquet", help="the workload's Parquet file")
    parser.add_argument("--runs", type=int, default=20, help="DP releases (20)")
    parser.add_argument("--loads", type=int, default=3, help="times the load is timed (3)")
    if extra:
        extra(parser)
    return parser.parse_args()


def versions(*distributions: str) -> str:
    """``"name version, ..."`` of installed distributions, as pip names them."""
    return ", ".join(f"{d} {importlib.metadata.version(d)}" for d in distributions)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of one call and its value, after a garbage collection."""
    gc.collect()
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


@dataclass
class Contender:
    """One line of the table: a library (or hand-written query) and how it releases."""

    name: str
    version: str
    release: Callable[[Any], Answer]
    split: str
    """How ε = 1 is spent over the two statistics, in words."""
    notes: str = ""
    uses_load: bool = True
    """False when each release reads the Parquet file itself (the load is not used)."""


def run(
    load: Callable[[], Any],
    contenders: list[Contender],
    *,
    loads: int,
    runs: int,
    startup: float | None = None,
) -> None:
    """Time ``loads`` loads, then ``runs`` rounds of one release per contender; print records.

    Rounds interleave the contenders, so a burst of load elsewhere on the machine hits them
    alike and their ratios are fair. The releases read the last load. ``startup`` is time
    spent before loading that is neither load nor query (starting Spark's JVM). One JSON
    line per contender is printed on stdout.
    """
    load_times, data = [], None
    for _ in range(loads):
        data = None
        seconds, data = timed(load)
        load_times.append({"s": seconds, "loadavg": os.getloadavg()[0]})
    releases: dict[str, list[dict]] = {c.name: [] for c in contenders}
    for _ in range(runs):
        for contender in contenders:
            seconds, answer = timed(lambda c=contender: c.release(data))
            if sorted(answer) != KEYS:
                raise RuntimeError(f"{contender.name}: expected groups 0..{GROUPS - 1}")
            releases[contender.name].append(
                {
                    "s": seconds,
                    "loadavg": os.getloadavg()[0],
                    "answer": {str(g): [float(c), float(s)] for g, (c, s) in answer.items()},
                }
            )
    for contender in contenders:
        done = releases[contender.name]
        print(
            json.dumps(
                {
                    "library": contender.name,
                    "version": contender.version,
                    "python": sys.version.split()[0],
                    "split": contender.split,
                    "notes": contender.notes,
                    "startup_s": startup,
                    "load_s": statistics.median(t["s"] for t in load_times)
                    if contender.uses_load
                    else None,
                    "loads": load_times if contender.uses_load else [],
                    "query_s": statistics.median(r["s"] for r in done),
                    "releases": done,
                }
            ),
            flush=True,
        )
