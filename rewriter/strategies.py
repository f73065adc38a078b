"""The bounding strategies, one spec each: what privsql knows about a way of bounding one
unit's contribution to a (unit, group) cell, in one place (docs/privacy.md sections 2–3).

``ROWS`` is AKMV19's sample limiting (keep the k rows with the smallest keyed content hash),
``WEIGHTS`` EMMMR20's weighted averaging (a cell of s rows weighs each row min(1, h/s)),
``CLIP`` RT24's per-unit clipping (Theorem III.1: a cell's centred sum clipped to T = R·n).
The SQL of each (its ``__bounded`` stage) is ``generate.BOUNDING[name]``; everything else
the planner and the generator decide from the strategy is read here.
"""

from __future__ import annotations

from dataclasses import dataclass

WEIGHT_BITS = 20
"""BOUND WEIGHTS: weights min(1, h/s) are applied on a grid of 2**-WEIGHT_BITS."""


@dataclass(frozen=True)
class StrategySpec:
    """One bounding strategy (see the module's docstring)."""

    name: str
    weight_bits: int = 0
    """Per-row weights on a 2**-bits fixed-point grid (0: rows are kept or dropped whole)."""
    rereads_rows: bool = True
    """Cells over the cap read their rows again (to rank or clip them); weighting does not."""
    always_automatic: bool = False
    """The cap is always chosen privately (RT24's T has no analyst-written form)."""
    rank_factor: int = 1
    """The AUTO rank rule's target is this many times AKMV19's (RT24 doubles it)."""
    per_rule_caps: bool = False
    """Each AUTO rule may get its own cap (weighting needs no common one)."""
    only_clippable: bool = False
    """Only aggregates whose spec is ``clippable`` can be bounded this way."""


STRATEGIES = {
    spec.name: spec
    for spec in (
        StrategySpec("ROWS"),
        StrategySpec(
            "WEIGHTS",
            weight_bits=WEIGHT_BITS,
            rereads_rows=False,
            per_rule_caps=True,
        ),
        StrategySpec(
            "CLIP",
            always_automatic=True,
            rank_factor=2,
            only_clippable=True,
        ),
    )
}
"""Every bounding strategy, by the name BOUND takes (AUTO is WEIGHTS with AUTO caps)."""
