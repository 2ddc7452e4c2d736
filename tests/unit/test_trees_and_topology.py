"""The double binary tree's two trees, and Topology."""

import pytest

import pyar
from pyar.algorithms.double_binary_tree import _renumbering, tree


@pytest.mark.parametrize("size", range(1, 130))
def test_both_trees_are_binary_trees_over_every_rank(size):
    parent, children, height, depth = tree(size)
    assert parent[0] == -1 and len(children[0]) == (size > 1)
    for r in range(1, size):
        assert r in children[parent[r]]
        assert len(children[r]) <= 2
        assert depth[r] == depth[parent[r]] + 1 and height[parent[r]] > height[r]
    assert sum(map(len, children)) == size - 1
    assert max(depth) <= size.bit_length()
    renumbered = _renumbering(size)
    assert sorted(renumbered) == list(range(size))


@pytest.mark.parametrize("size", range(3, 130))
def test_no_rank_is_a_leaf_in_both_trees(size):
    _, children, _, _ = tree(size)
    leaves_a = {r for r in range(size) if not children[r]}
    renumbered = _renumbering(size)
    leaves_b = {renumbered[p] for p in range(size) if not children[p]}
    assert not leaves_a & leaves_b


def test_topology_numbers_nodes_in_order_of_appearance():
    t = pyar.Topology(["b", "a", "b", "c"])
    assert t.node_of == (0, 1, 0, 2) and t.nodes == ((0, 2), (1,), (3,)) and t.size == 4
    assert t == pyar.Topology([5, 3, 5, 9]) and hash(t) == hash(pyar.Topology([0, 1, 0, 2]))
    assert pyar.Topology.regular(5, 2).nodes == ((0, 1), (2, 3), (4,))


def test_topology_must_fit_the_schedule():
    with pytest.raises(ValueError, match="topology describes 4 ranks, not 6"):
        pyar.schedule("hierarchical", 6, 10, topology=pyar.Topology.regular(4, 2))
    with pytest.raises(ValueError, match="at least one rank"):
        pyar.Topology([])
    with pytest.raises(ValueError, match="ranks per node must be"):
        pyar.Topology.regular(4, 0)
