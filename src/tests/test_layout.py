"""Local layouts from the placement semantics (meshtest.model.layout), table-driven: the rows
are torch's documented examples (``compute_local_shape_and_global_offset``'s docstring, the
``_StridedShard`` docstring) and ``torch.chunk``'s split rule, uneven and empty shards included —
never answers read from torch's code."""
from __future__ import annotations

import pytest

from meshtest.model.layout import Layout, chunk, held_indices, local_layout
from meshtest.model.placement import Partial, Replicate, Shard, StridedShard


@pytest.mark.parametrize("n, pieces", [
    (2, [[0, 1, 2], [3, 4]]),           # 5 in 2: 3, 2
    (3, [[0, 1], [2, 3], [4]]),         # 5 in 3: 2, 2, 1
    (4, [[0, 1], [2, 3], [4], []]),     # 5 in 4: 2, 2, 1, 0 (ceil first, then empty)
    (6, [[0], [1], [2], [3], [4], []]),
])
def test_chunk_splits_as_torch_chunk(n, pieces):
    assert chunk(list(range(5)), n) == pieces


# torch's compute_local_shape_and_global_offset docstring: [2, 5] on (2, 2) as (Shard(1), Shard(1))
DOCSTRING = [((0, 0), (2, 2), (0, 0)), ((0, 1), (2, 1), (0, 2)), ((1, 0), (2, 1), (0, 3)), ((1, 1), (2, 1), (0, 4))]


@pytest.mark.parametrize("coord, shape, offset", DOCSTRING)
def test_nested_shards_split_what_the_first_left(coord, shape, offset):
    assert local_layout((2, 5), (2, 2), coord, (Shard(1), Shard(1))) == Layout(shape, offset)


# the _StridedShard docstring: [8, 8] on (2, 2) placed [StridedShard(0, 2), Shard(0)]: rows 0-1, 4-5, 2-3, 6-7
@pytest.mark.parametrize("coord, rows", [((0, 0), [0, 1]), ((0, 1), [4, 5]), ((1, 0), [2, 3]), ((1, 1), [6, 7])])
def test_a_strided_shard_deals_its_pieces_as_the_docstring_shows(coord, rows):
    assert held_indices((8, 8), (2, 2), coord, (StridedShard(0, 2), Shard(0)))[0] == rows
    # and as plain (Shard(0), Shard(0)) would not: rows 0-1, 2-3, 4-5, 6-7
    plain = held_indices((8, 8), (2, 2), coord, (Shard(0), Shard(0)))[0]
    assert plain == [2 * (2 * coord[0] + coord[1]), 2 * (2 * coord[0] + coord[1]) + 1]


@pytest.mark.parametrize("global_shape, mesh, coord, placements, shape, offset", [
    ((5, 3), (2,), (1,), (Shard(0),), (2, 3), (3, 0)),                 # uneven: 3, 2
    ((1, 3), (2,), (1,), (Shard(0),), (0, 3), (1, 0)),                 # empty: offset past the end
    ((4, 6), (3,), (2,), (Shard(0),), (0, 6), (4, 0)),                 # 4 in 3: 2, 2, 0
    ((4, 6), (2, 2), (1, 0), (Shard(1), Partial("max")), (4, 3), (0, 3)),
    ((4, 6), (2, 2), (1, 1), (Replicate(), Shard(-1)), (4, 3), (0, 3)),  # a negative dim counts from the last
    ((6, 4), (2, 2), (1, 1), (Shard(0), Shard(0)), (1, 4), (5, 0)),    # 6 in 2: 3, 3; 3 in 2: 2, 1
    ((3,), (2, 2), (1, 1), (Shard(0), Shard(0)), (0,), (3,)),          # 3 in 2: 2, 1; 1 in 2: 1, 0
    ((2, 3, 4), (2, 3), (0, 2), (Shard(2), Shard(1)), (2, 1, 2), (0, 2, 0)),
])
def test_uneven_empty_and_mixed_placements(global_shape, mesh, coord, placements, shape, offset):
    assert local_layout(global_shape, mesh, coord, placements) == Layout(shape, offset)


@pytest.mark.parametrize("args, says", [
    (((4,), (2,), (0, 0), (Shard(0),)), "one placement per mesh dim"),
    (((4,), (2,), (2,), (Shard(0),)), "coordinate 2 on mesh dim 0 of 2 ranks"),
    (((4,), (2,), (0,), (Shard(1),)), r"Shard\(1\) on a tensor of 1 dim"),
])
def test_a_layout_that_cannot_be_named_says_why(args, says):
    with pytest.raises(ValueError, match=says):
        local_layout(*args)
