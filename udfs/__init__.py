"""Noise samplers and mechanisms for privsql, registered as DuckDB functions.

Everything here works on exact integers (grid units) with noise from an exact discrete
Laplace sampler (Canonne, Kamath, Steinke 2020) fed by the OS CSPRNG. ``udfs`` knows
nothing of SQL parsing; see ``docs/privacy.md`` (Appendix A) for the privacy arguments.
"""

from udfs.discrete_laplace import bernoulli_exp, sample_discrete_laplace, scale_of
from udfs.laplace import laplace_halfwidth, laplace_release
from udfs.partition import keep_partitions, partition_threshold
from udfs.quantile import (
    INTERVAL_ALPHA,
    private_quantile,
    private_quantile_interval,
    private_weighted_quantile,
    quantile_scores,
    quantile_sensitivity,
    rank_error_bound,
)
from udfs.random import RandomSource, SeededRandom, SystemRandom
from udfs.register import (
    HUGEINT_MAX,
    HUGEINT_MIN,
    QUANTILE_FIELDS,
    UdfNameConflict,
    UdfNames,
    register,
    unregister,
)
from udfs.row_bounds import balanced_bounds, noisy_row_weights, spread_bounds, tightened_bounds
from udfs.selection import permute_and_flip
from udfs.threshold import (
    bulk_top,
    magnitude_bounds,
    noisy_histograms,
    quantile_reach,
    rank_threshold,
    variance_threshold,
)
from udfs.unit_means import (
    MeanHistogram,
    clamped_mean_sums,
    mean_window,
    noisy_mean_bins,
    noisy_mean_sums,
)

__all__ = [
    "HUGEINT_MAX",
    "HUGEINT_MIN",
    "INTERVAL_ALPHA",
    "QUANTILE_FIELDS",
    "MeanHistogram",
    "RandomSource",
    "SeededRandom",
    "SystemRandom",
    "UdfNameConflict",
    "UdfNames",
    "balanced_bounds",
    "bernoulli_exp",
    "bulk_top",
    "clamped_mean_sums",
    "keep_partitions",
    "laplace_halfwidth",
    "laplace_release",
    "magnitude_bounds",
    "mean_window",
    "noisy_histograms",
    "noisy_mean_bins",
    "noisy_mean_sums",
    "noisy_row_weights",
    "partition_threshold",
    "permute_and_flip",
    "private_quantile",
    "private_quantile_interval",
    "private_weighted_quantile",
    "quantile_reach",
    "quantile_scores",
    "quantile_sensitivity",
    "rank_error_bound",
    "rank_threshold",
    "register",
    "sample_discrete_laplace",
    "scale_of",
    "spread_bounds",
    "tightened_bounds",
    "unregister",
    "variance_threshold",
]
