"""Topology: which node each rank runs on.

Topology-aware schedules (``hierarchical``) keep the slow links between nodes
for what must cross them (topology-aware communication). A :class:`pyar.Comm` learns its topology
from ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``; ``PYAR_RANKS_PER_NODE=k``
(:mod:`pyar.runtime.settings`) overrides it with :meth:`Topology.regular` (ranks
``0..k-1`` on node 0, the next k on node 1, ...) so that several nodes can be
emulated on one machine. Schedules and the simulator take a Topology directly.
"""

from __future__ import annotations

from functools import cached_property


class Topology:
    """The node of every rank: ``Topology([0, 0, 1, 1])`` is two nodes of two ranks.

    Node labels may be any hashable values; nodes are numbered in the order
    their first rank appears, so equal layouts compare (and cache) equal.
    """

    __slots__ = ("node_of", "__dict__")

    def __init__(self, node_of):
        labels = list(node_of)
        if not labels:
            raise ValueError("a topology needs at least one rank")
        number = {}
        self.node_of = tuple(number.setdefault(label, len(number)) for label in labels)

    @classmethod
    def regular(cls, size: int, ranks_per_node: int) -> Topology:
        """``size`` ranks, ``ranks_per_node`` per node in rank order (the last node may be short)."""
        if not isinstance(ranks_per_node, int) or ranks_per_node < 1:
            raise ValueError(f"ranks per node must be an int >= 1, got {ranks_per_node!r}")
        return cls(r // ranks_per_node for r in range(size))

    @property
    def size(self) -> int:
        return len(self.node_of)

    @cached_property
    def nodes(self) -> tuple[tuple[int, ...], ...]:
        """The ranks of each node, in rank order."""
        members = [[] for _ in range(max(self.node_of) + 1)]
        for rank, node in enumerate(self.node_of):
            members[node].append(rank)
        return tuple(map(tuple, members))

    def __eq__(self, other):
        return isinstance(other, Topology) and self.node_of == other.node_of

    def __hash__(self):
        return hash(self.node_of)

    def __repr__(self):
        return f"Topology({list(self.node_of)})"
