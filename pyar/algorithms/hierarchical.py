"""Hierarchical allreduce: reduce-scatter within each node, allreduce across nodes, allgather within.

With ``L`` the fewest ranks on any node, local ranks ``0..L-1`` of every node
are its leaders and local rank ``j >= L`` first folds its buffer into leader
``j mod L`` (which hands the result back at the end), so nodes of unequal
size work. The leaders of a node ring-reduce-scatter the buffer into ``L``
blocks; the leaders with the same local index i, one per node, ring-allreduce
block i across the nodes; a ring allgather within each node completes the
buffer. Only the middle phase crosses nodes, and each node sends ``2(K-1)/K
* M`` bytes across in all (``K`` nodes), spread over its ``L`` leaders,
against ring's ``2(N-1)/N * M`` per rank over a ring that leaves every node.

Steps: ``2(L-1) + 2(K-1)`` (+2 on ranks beyond L). Cost, ``alpha_o``/``beta_o``
for the links between nodes: ``2(L-1)*alpha + 2(L-1)/L*M*beta + 2(K-1)*alpha_o
+ 2(K-1)/(K*L)*M*beta_o + gamma terms``. Without a topology every rank is on
one node (a plain ring). Limits: any ``N >= 1`` and any node sizes.

::

    node 0: 0 1     node 1: 2 3      within: 0◄►1, 2◄►3 (reduce-scatter, allgather)
                                     across: 0◄►2 (block 0), 1◄►3 (block 1)
"""

from ..core.schedule import Chunk, Recv, Send, compact, split
from ..core.topology import Topology
from . import _terms, register_algorithm, ring


def _cost(n, count, m, topology):
    """Leaders' ring reduce-scatter, the ring allreduce across nodes, the ring allgather.

    With ``L`` leaders per node, ``K`` nodes and up to ``E`` ranks beyond
    the leaders per leader, the critical path starts at a leader that folds
    its ``E`` extras' buffers in (one after another on its receive port),
    runs the three rings in step with every other leader, and ends handing
    the result to its extras: exact for any node sizes.
    """
    nodes = topology.nodes if topology is not None else (range(n),)
    leaders = min(map(len, nodes))
    extras = -(-max(map(len, nodes)) // leaders) - 1
    ends = _terms.Terms(2 * extras, 2 * extras * m, extras * m, 2 if extras else 0)
    return _terms.add(ends, _terms.ring(leaders, m, 1, 1),
                      _terms.ring(len(nodes), m / leaders, 2, 1), _terms.ring(leaders, m, 1, 0))


@register_algorithm("hierarchical", auto=True, topology_aware=True, cost=_cost)
def hierarchical(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    topology = topology or Topology([0] * size)
    nodes = topology.nodes
    node = nodes[topology.node_of[rank]]
    leaders = min(len(n) for n in nodes)
    local = node.index(rank)
    everything = Chunk("data", 0, count)
    if local >= leaders:
        leader = node[local % leaders]
        return compact([[Send(leader, everything)], [Recv(leader, everything)]])
    extras = node[local + leaders::leaders]
    lo, hi = split(count, leaders)[local]
    across = [n[local] for n in nodes]
    return compact([[Recv(extra, everything, reduce=True) for extra in extras],
                    *ring.reduce_scatter(local, node[:leaders], 0, count),
                    *ring.allreduce(topology.node_of[rank], across, lo, hi),
                    *ring.allgather(local, node[:leaders], 0, count),
                    [Send(extra, everything) for extra in extras]])


def _table(size, count, topology=None):
    """Every rank's steps at once where all ranks share one node in rank order (then the
    schedule is ring's); None on several nodes (the per-rank builder makes those)."""
    if topology is None or topology.nodes == (tuple(range(size)),):
        return ring.table_of(size, count, ((1, True), (0, False)))
    return None


def _waves(size, count, topology=None):
    """Ring's messages a step at a time where all ranks share one node in rank order, else None."""
    if topology is None or topology.nodes == (tuple(range(size)),):
        return ring.waves_of(size, count, ((1, True), (0, False)))
    return None


hierarchical.table = _table
hierarchical.waves = _waves
