"""random_draw: how a random op's distributed output is judged where DTensor has an RNG. The
expected answers come from the two-sample Kolmogorov-Smirnov test's definition and its
tabulated critical values (c(0.05) = 1.358), worked out by hand here, and from the documented
shard rule; canaries: a shifted or widened distribution and ranks that repeated one stream."""
from __future__ import annotations

import numpy as np
import pytest

from meshtest.properties import RANDOM_DRAW_ALPHA, ks_critical, ks_statistic, random_draw


def test_the_ks_statistic_by_its_definition():
    assert ks_statistic(np.array([1.0, 2, 3]), np.array([3.0, 1, 2])) == 0.0
    assert ks_statistic(np.array([1.0, 2]), np.array([3.0, 4])) == 1.0
    # F_a - F_b at 2, 3, 4: 0.5 - 0, 0.75 - 0.25, 1 - 0.5
    assert ks_statistic(np.array([1.0, 2, 3, 4]), np.array([3.0, 4, 5, 6])) == 0.5
    # ties: both take 0 and 1 only; F at 0 is 3/4 and 1/4
    assert ks_statistic(np.array([0.0, 0, 0, 1]), np.array([0.0, 1, 1, 1])) == 0.5


def test_the_critical_value_is_kolmogorovs():
    assert ks_critical(100, 100, 0.05) == pytest.approx(1.358 * (2 / 100) ** 0.5, rel=1e-3)
    assert ks_critical(50, 200, RANDOM_DRAW_ALPHA) > ks_critical(50, 200, 0.05)
    with pytest.raises(ValueError):
        ks_critical(0, 3)


def test_right_draws_pass():
    """Other random numbers from the same distribution pass, continuous and discrete (a dropout's
    zeros and scaled values, a Bernoulli's 0/1): 300 draws, none fails at alpha 1e-6."""
    rng = np.random.default_rng(0)
    check = random_draw()
    for _ in range(100):
        assert check(rng.standard_normal(1000), rng.standard_normal(1000)) is None
        x = rng.standard_normal(512)
        assert check(x * (rng.random(512) > 0.3) / 0.7, x * (rng.random(512) > 0.3) / 0.7) is None
        assert check((rng.random((8, 8)) < 0.5).astype(float), (rng.random((8, 8)) < 0.5).astype(float)) is None


def test_a_wrong_distribution_fails():
    rng = np.random.default_rng(1)
    check = random_draw()
    ref = rng.standard_normal(4096)
    shifted = check(ref, rng.standard_normal(4096) + 0.5)
    wider = check(ref, rng.standard_normal(4096) * 1.5)
    assert shifted and "Kolmogorov-Smirnov" in shifted and wider and "Kolmogorov-Smirnov" in wider


def test_ranks_that_repeated_one_stream_fail():
    """A (16, 8) output of an input placed Shard(0) on 4 ranks: every rank drew the same numbers
    (each piece of 4 rows equal), while the reference's pieces differ."""
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((16, 8))
    repeated = np.tile(rng.standard_normal((4, 8)), (4, 1))
    got = random_draw([(0, 4, (16, 8))])(ref, repeated)
    assert got and "4 shards along dim 0 hold the same values" in got
    assert random_draw([(0, 4, (16, 8))])(ref, rng.standard_normal((16, 8))) is None
    assert random_draw([(0, 4, (8, 16))])(ref, repeated) is None  # another input's shape: not this output's
    # uneven: 10 rows on 4 ranks are pieces of 3, 3, 3, 1; their first rows repeat
    ref10 = rng.standard_normal((10, 8))
    row = rng.standard_normal((1, 8))
    repeated10 = np.concatenate([np.concatenate([row, rng.standard_normal((2, 8))]) for _ in range(3)] + [row])
    assert "shards along dim 0" in (random_draw([(0, 4, (10, 8))], min_chunk=8)(ref10, repeated10) or "")


def test_equal_reference_pieces_excuse_equal_shards():
    """Where the single-device draw's pieces are equal themselves (an op whose output does not
    vary along the dim), equal shards are no evidence of a repeated stream."""
    const = np.ones((16, 8))
    assert random_draw([(0, 4, (16, 8))])(const, const) is None
