"""Utilisation quantiles from sorted tiers (`solver.maxmin.SortedLinks`: the all-links order
statistics found by bisection over the tiers' sorts) against one sort of every link and
numpy, on random utilisations with ties, infinities, dead links and empty tiers."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from fabricjax.solver.maxmin import (QUANTILES, SortedLinks, link_statistics,
                                     sorted_utilisation, utilisation_cdf)


def random_links(seed: int):
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(0, 30)) for _ in range(int(rng.integers(2, 5)))]
    sizes[0] = max(sizes[0], 1)
    starts = np.cumsum([0] + sizes)
    bounds = tuple((int(a), int(b)) for a, b in zip(starts[:-1], starts[1:]))
    total = int(starts[-1])
    if seed % 3 == 0:     # ties
        util = rng.choice([0.0, 0.5, 1.0, 2.0], total).astype(np.float32)
    else:
        util = rng.uniform(0, 3, total).astype(np.float32)
    if seed % 4 == 1:
        util[rng.random(total) < 0.1] = np.inf
    alive = rng.random(total) < (0.0 if seed % 11 == 5 else 0.8)
    return jnp.asarray(util), jnp.asarray(alive), bounds


# each seed draws new tier sizes, so each compiles its own programs: the quick run keeps one
# seed of every kind (seed % 4 picks infinities and layouts, seed 5 has every link dead)
QUICK_SEEDS = (0, 1, 2, 3, 5)


@pytest.mark.parametrize("seed", [
    pytest.param(seed, marks=() if seed in QUICK_SEEDS else pytest.mark.slow)
    for seed in range(16)])
def test_tier_sorts_give_the_one_sort_figures(seed):
    util, alive, bounds = random_links(seed)
    by_tiers = sorted_utilisation(util, alive, bounds)
    whole = sorted_utilisation(util, alive)
    assert len(by_tiers.parts) == sum(b > a for a, b in bounds) and len(whole.parts) == 1
    masked = np.sort(np.where(alive, util, -np.inf))
    np.testing.assert_array_equal(by_tiers.take(jnp.arange(masked.size)), masked)
    np.testing.assert_array_equal(whole.take(jnp.arange(masked.size)), masked)
    for got, want in [(link_statistics(util, alive, bounds, ordered=by_tiers),
                       link_statistics(util, alive, bounds, ordered=whole)),
                      (utilisation_cdf(util, alive, by_tiers), utilisation_cdf(util, alive, whole))]:
        np.testing.assert_array_equal(got, want)
    live = np.asarray(util)[np.asarray(alive)]
    if live.size and np.all(np.isfinite(live)):
        np.testing.assert_allclose(link_statistics(util, alive, bounds)[0],
                                   np.quantile(live, QUANTILES), rtol=1e-6)


def test_tiers_that_do_not_partition_the_links_are_sorted_whole():
    util, alive, _ = random_links(2)
    n = util.shape[0]
    for bounds in [((0, n // 2),), ((0, 1), (2, n)), ((1, n // 2), (n // 2, n))]:
        assert len(sorted_utilisation(util, alive, bounds).parts) == 1
    assert isinstance(sorted_utilisation(util, alive), SortedLinks)
