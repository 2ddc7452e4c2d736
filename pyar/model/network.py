"""Networks: a graph of directed links with bandwidth and latency, its routing, and what a
schedule's messages load on each link.

A :class:`Network` has ``size`` rank endpoints and ``len(bw)`` directed links
(a full-duplex cable is two links, one each way, each with the cable's
bandwidth). Every message from rank ``s`` to rank ``d`` takes one fixed route
(no adaptive routing, no multipath), a sequence of links:

- ``torus``: one rank per router, routers on a 1-, 2- or 3-D torus of ``dims``
  (each >= 2); dimension-order routing, dimension 0 first, each ring the
  shortest way round (a tie, half-way round a ring of even length, goes the
  ``+`` way). Hops: the sum over dimensions of ``min(delta, k - delta)``.
- ``fattree``: a two-level fat tree, ``leaves`` leaf switches of
  ``ranks_per_leaf`` ranks each and a spine layer seen as one logical switch;
  each leaf's uplink (all its links to the spines, spread evenly as perfect
  ECMP would) carries ``ranks_per_leaf * link_bw / oversubscription``.
  Up-down routing via the lowest common switch: rank -> leaf -> rank (2 hops)
  within a leaf, rank -> leaf -> spine -> leaf -> rank (4 hops) across.
- ``switch``: ``nodes`` nodes of ``ranks_per_node`` ranks on one switch: each
  rank reaches its node's hub over an intra-node link (``intra_bw``), each
  node the switch over its NIC link (``link_bw``); routed as ``fattree``.
- ``dragonfly``: ``groups`` groups of ``routers`` routers of ``ranks_per_router``
  ranks; routers of a group all-to-all (local links), one global link between
  every two groups, the one to the m-th other group (counting on from the
  group itself) on router ``m // ceil((groups - 1) / routers)``. Minimal
  routing: local hop to the router holding the global link, the global link,
  local hop to the destination router (each local hop only where needed).

Links have a ``tier``: 0 injection (rank to its router, leaf or node hub), 1
local (torus links, dragonfly local links), 2 global (dragonfly global links,
leaf and node uplinks: what crosses the upper level). Bandwidths are in GB/s
(1e9 B/s), latencies in seconds, as a machine file's ``network`` entry gives
them (:func:`from_spec`). Routes are computed in numpy for a batch of
(source, destination) pairs the first time they are asked for, and kept.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

KINDS = ("torus", "fattree", "switch", "dragonfly")
TIERS = ("injection", "local", "global")


class Traffic(NamedTuple):
    """What a set of messages loads on a network's links.

    ``link_bytes[l]``: bytes over link ``l`` in all; ``steps``, ``step_links``,
    ``step_bytes``: the nonzero loads per (step, link), sorted by step then link;
    ``hops[m]``: links on message m's route; ``congestion[m]``: seconds of the most
    congested link of m's route in m's step (its step bytes / its bandwidth);
    ``latency[m]``: the sum of the latencies of m's route.
    """

    link_bytes: np.ndarray
    steps: np.ndarray
    step_links: np.ndarray
    step_bytes: np.ndarray
    hops: np.ndarray
    congestion: np.ndarray
    latency: np.ndarray

    @property
    def max_link(self) -> int:
        """The most loaded link in all (the first of equals; -1 without traffic)."""
        return int(np.argmax(self.link_bytes)) if self.link_bytes.any() else -1

    def step_max(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per step with traffic: ``(step, its most loaded link's bytes, that link)``."""
        if not self.steps.size:
            return (np.zeros(0, np.int64),) * 3
        order = np.lexsort((-self.step_bytes, self.steps))   # by step, then most bytes first
        first = order[np.r_[True, self.steps[order][1:] != self.steps[order][:-1]]]
        return self.steps[first], self.step_bytes[first], self.step_links[first]

    def tier_bytes(self, network) -> dict:
        """Bytes over the links of each tier, by tier name."""
        return {name: int(self.link_bytes[network.tier == t].sum())
                for t, name in enumerate(TIERS)}


class Network:
    """Ranks, directed links (``bw`` GB/s, ``latency`` s, ``tier`` each) and a router.

    Build one with :func:`torus`, :func:`fattree`, :func:`switch`,
    :func:`dragonfly` or :func:`from_spec`.
    """

    def __init__(self, kind, size, bw, latency, tier, width, router, namer, spec):
        self.kind, self.size, self.spec = kind, size, spec
        self.bw = np.asarray(bw, np.float64)
        self.latency = np.asarray(latency, np.float64)
        self.tier = np.asarray(tier, np.int8)
        self._width, self._router, self._namer = width, router, namer
        self._keys = np.zeros(0, np.int64)          # the pairs routed so far, sorted
        self._routes = np.zeros((0, width), np.int64)   # their links, -1 padded

    def __repr__(self):
        return f"Network({self.spec!r})"

    def describe(self) -> str:
        """The network in words."""
        s = self.spec
        if self.kind == "torus":
            shape = "x".join(map(str, s["dims"]))
            return f"torus {shape}, {s['link_bw']:g} GB/s links"
        if self.kind == "fattree":
            return (f"fat tree of {s['leaves']} leaves of {s['ranks_per_leaf']} ranks, "
                    f"{s['link_bw']:g} GB/s links, oversubscription {s['oversubscription']:g}")
        if self.kind == "switch":
            return (f"{s['nodes']} nodes of {s['ranks_per_node']} ranks on a switch, "
                    f"{s['link_bw']:g} GB/s NIC links, {s['intra_bw']:g} GB/s within a node")
        return (f"dragonfly of {s['groups']} groups of {s['routers']} routers of "
                f"{s['ranks_per_router']} ranks, {s['link_bw']:g} GB/s local, "
                f"{s['global_bw']:g} GB/s global links")

    def link_name(self, link: int) -> str:
        """Link ``link`` in words, e.g. ``(0,1)->(0,2)`` or ``group 0 -> group 3``."""
        return self._namer(int(link))

    def route(self, src: int, dst: int) -> list[int]:
        """The links of the route from rank ``src`` to rank ``dst``, in order."""
        _, links = self.routes(np.array([src]), np.array([dst]))
        return links.tolist()

    def routes(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        """``(lengths, links)``: the routes of pairs ``(src[k], dst[k])`` concatenated, each
        ``lengths[k]`` links long (none from a rank to itself). Pairs not asked for before are
        routed once, in numpy."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.size):
            raise ValueError(f"ranks must be in [0, {self.size}) on this {self.kind}")
        keys, inverse = np.unique(src * self.size + dst, return_inverse=True)
        at = np.searchsorted(self._keys, keys)
        known = at < self._keys.size
        known[known] = self._keys[at[known]] == keys[known]
        if not known.all():
            new = keys[~known]
            made = self._router(new // self.size, new % self.size)
            merged = np.concatenate((self._keys, new))
            order = np.argsort(merged, kind="stable")
            self._keys = merged[order]
            self._routes = np.concatenate((self._routes, made))[order]
            at = np.searchsorted(self._keys, keys)
        padded = self._routes[at][inverse]
        padded[src == dst] = -1             # a message to itself crosses no link
        return (padded >= 0).sum(axis=1), padded[padded >= 0]

    def traffic(self, src, dst, nbytes, step) -> Traffic:
        """The loads of messages ``src[m] -> dst[m]`` of ``nbytes[m]`` bytes, each in the
        step ``step[m]`` (the sender's step: messages of one step share links)."""
        src, dst, step = (np.asarray(a, np.int64) for a in (src, dst, step))
        nbytes = np.asarray(nbytes, np.float64)
        nlinks = self.bw.size
        lengths, links = self.routes(src, dst)
        owner = np.repeat(np.arange(src.size), lengths)
        link_bytes = np.bincount(links, nbytes[owner], nlinks)
        key = step[owner] * nlinks + links
        keys, inverse = np.unique(key, return_inverse=True)
        step_bytes = np.bincount(inverse, nbytes[owner], keys.size)
        seconds = step_bytes[inverse] / (self.bw[links] * 1e9)
        starts = np.cumsum(lengths) - lengths
        congestion = np.zeros(src.size)
        latency = np.zeros(src.size)
        some = lengths > 0
        if some.any():
            congestion[some] = np.maximum.reduceat(seconds, starts[some])
            latency[some] = np.add.reduceat(self.latency[links], starts[some])
        return Traffic(link_bytes.astype(np.int64), keys // nlinks, keys % nlinks,
                       step_bytes.astype(np.int64), lengths, congestion, latency)

    def table_traffic(self, table, itemsize: int) -> Traffic:
        """:meth:`traffic` of the sends of a schedule's :class:`~pyar.core.schedule.Table`
        (``itemsize`` bytes per element), in the order of its send rows."""
        size = len(table.nsteps)
        if size > self.size:
            raise ValueError(f"a schedule of {size} ranks does not fit this network of "
                             f"{self.size} ({self.describe()})")
        send = table.send
        return self.traffic(table.rank[send], table.peer[send],
                            (table.hi[send] - table.lo[send]) * itemsize, table.step[send])


def _positive(value, what, integer=False):
    ok = (type(value) is int if integer else isinstance(value, (int, float))
          and not isinstance(value, bool))
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be {'an int' if integer else 'a number'} > 0, "
                         f"got {value!r}")
    return value


def torus(dims, link_bw: float, link_latency: float = 0.0) -> Network:
    """A torus of ``dims`` (1 to 3 ints >= 2) routers, one rank each (rank = router,
    numbered with dimension 0 fastest); ``link_bw`` GB/s and ``link_latency`` s per link.
    Link ``(router * len(dims) + d) * 2 + (0 for +, 1 for -)`` leaves ``router`` along
    dimension d."""
    if not isinstance(dims, (list, tuple)) or not 1 <= len(dims) <= 3 \
            or not all(type(k) is int and k >= 2 for k in dims):
        raise ValueError(f"a torus needs dims, a list of 1 to 3 ints >= 2, got {dims!r}")
    dims = list(dims)
    _positive(link_bw, "link_bw")
    nd, size = len(dims), math.prod(dims)
    stride = np.cumprod([1] + dims[:-1])
    width = sum(k // 2 for k in dims)

    def router(src, dst):
        out = np.full((src.size, width), -1, np.int64)
        here = src.copy()
        col = 0
        for d, k in enumerate(dims):
            a, b = src // stride[d] % k, dst // stride[d] % k
            ahead = (b - a) % k
            plus = ahead <= k // 2
            hops = np.where(plus, ahead, k - ahead)
            for j in range(k // 2):
                moving = j < hops
                out[moving, col] = (here[moving] * nd + d) * 2 + ~plus[moving]
                pos = here // stride[d] % k
                step = np.where(plus, 1, -1)
                here = np.where(moving, here + ((pos + step) % k - pos) * stride[d], here)
                col += 1
        return out

    def namer(link):
        v, rest = divmod(link, 2 * nd)
        d, minus = divmod(rest, 2)
        pos = v // stride[d] % dims[d]
        w = v + (((pos + (-1 if minus else 1)) % dims[d]) - pos) * stride[d]
        coords = (lambda r: "(" + ",".join(str(r // stride[i] % dims[i]) for i in range(nd)) + ")")
        return f"{coords(v)}->{coords(w)}"

    n = size * nd * 2
    spec = {"kind": "torus", "dims": dims, "link_bw": link_bw, "link_latency": link_latency}
    return Network("torus", size, np.full(n, float(link_bw)), np.full(n, float(link_latency)),
                   np.ones(n), width, router, namer, spec)


def _two_level(kind, spec, leaves, per_leaf, down_bw, down_latency, up_bw, up_latency,
               leaf_word) -> Network:
    """Ranks on leaves, leaves on one upper switch: rank r's links are 2r (up) and 2r+1
    (down), leaf l's are 2n + 2l (up) and 2n + 2l + 1 (down)."""
    n = leaves * per_leaf

    def router(src, dst):
        ls, ld = src // per_leaf, dst // per_leaf
        across = ls != ld
        out = np.full((src.size, 4), -1, np.int64)
        out[:, 0] = 2 * src
        out[:, 1] = np.where(across, 2 * n + 2 * ls, 2 * dst + 1)
        out[across, 2] = 2 * n + 2 * ld[across] + 1
        out[across, 3] = 2 * dst[across] + 1
        return out

    def namer(link):
        if link < 2 * n:
            r, down = divmod(link, 2)
            return f"{leaf_word} {r // per_leaf} -> rank {r}" if down else \
                f"rank {r} -> {leaf_word} {r // per_leaf}"
        leaf, down = divmod(link - 2 * n, 2)
        return f"spine -> {leaf_word} {leaf}" if down else f"{leaf_word} {leaf} -> spine"

    bw = np.r_[np.full(2 * n, float(down_bw)), np.full(2 * leaves, float(up_bw))]
    latency = np.r_[np.full(2 * n, float(down_latency)), np.full(2 * leaves, float(up_latency))]
    tier = np.r_[np.zeros(2 * n), np.full(2 * leaves, 2)]
    return Network(kind, n, bw, latency, tier, 4, router, namer, spec)


def fattree(leaves: int, ranks_per_leaf: int, link_bw: float, link_latency: float = 0.0,
            oversubscription: float = 1.0) -> Network:
    """A two-level fat tree (see the module docstring): each leaf's uplink carries
    ``ranks_per_leaf * link_bw / oversubscription`` GB/s (1: full bisection)."""
    _positive(leaves, "leaves", True)
    _positive(ranks_per_leaf, "ranks_per_leaf", True)
    _positive(link_bw, "link_bw")
    _positive(oversubscription, "oversubscription")
    spec = {"kind": "fattree", "leaves": leaves, "ranks_per_leaf": ranks_per_leaf,
            "link_bw": link_bw, "link_latency": link_latency,
            "oversubscription": oversubscription}
    return _two_level("fattree", spec, leaves, ranks_per_leaf, link_bw, link_latency,
                      ranks_per_leaf * link_bw / oversubscription, link_latency, "leaf")


def switch(nodes: int, ranks_per_node: int, link_bw: float, link_latency: float = 0.0,
           intra_bw: float | None = None, intra_latency: float = 0.0) -> Network:
    """``nodes`` nodes of ``ranks_per_node`` ranks on one switch: NIC links of ``link_bw``
    GB/s between node and switch, links of ``intra_bw`` (default ``link_bw``) between a
    rank and its node's hub."""
    _positive(nodes, "nodes", True)
    _positive(ranks_per_node, "ranks_per_node", True)
    _positive(link_bw, "link_bw")
    intra_bw = link_bw if intra_bw is None else _positive(intra_bw, "intra_bw")
    spec = {"kind": "switch", "nodes": nodes, "ranks_per_node": ranks_per_node,
            "link_bw": link_bw, "link_latency": link_latency, "intra_bw": intra_bw,
            "intra_latency": intra_latency}
    return _two_level("switch", spec, nodes, ranks_per_node, intra_bw, intra_latency,
                      link_bw, link_latency, "node")


def dragonfly(groups: int, routers: int, ranks_per_router: int, link_bw: float,
              link_latency: float = 0.0, global_bw: float | None = None,
              global_latency: float | None = None) -> Network:
    """A dragonfly (see the module docstring): injection and local links of ``link_bw``
    GB/s, global links of ``global_bw`` (default ``link_bw``). Links: rank r's 2r (up),
    2r+1 (down); then local ``(group * routers + i) * routers + j`` from router i to j of
    a group; then global ``group * groups + other``."""
    for value, what in ((groups, "groups"), (routers, "routers"),
                        (ranks_per_router, "ranks_per_router")):
        _positive(value, what, True)
    _positive(link_bw, "link_bw")
    global_bw = link_bw if global_bw is None else _positive(global_bw, "global_bw")
    global_latency = link_latency if global_latency is None else global_latency
    g, a, p = groups, routers, ranks_per_router
    n = g * a * p
    local0, global0 = 2 * n, 2 * n + g * a * a
    per_router = max(1, -(-(g - 1) // a))       # global links per router

    def gateway(group, other):
        """The router (index in its group) of ``group`` holding the link to ``other``."""
        return ((other - group - 1) % g) // per_router

    def router(src, dst):
        rs, rd = src // p % a, dst // p % a
        gs, gd = src // (p * a), dst // (p * a)
        out = np.full((src.size, 5), -1, np.int64)
        out[:, 0] = 2 * src
        far = gs != gd
        ws = np.where(far, gateway(gs, gd), rd)        # where the source leaves its router
        wd = np.where(far, gateway(gd, gs), rd)
        hop = rs != ws
        out[hop, 1] = local0 + (gs[hop] * a + rs[hop]) * a + ws[hop]
        out[far, 2] = global0 + gs[far] * g + gd[far]
        hop = far & (wd != rd)
        out[hop, 3] = local0 + (gd[hop] * a + wd[hop]) * a + rd[hop]
        out[:, 4] = 2 * dst + 1
        return out

    def namer(link):
        if link < local0:
            r, down = divmod(link, 2)
            return f"router {r // p} -> rank {r}" if down else f"rank {r} -> router {r // p}"
        if link < global0:
            gi, j = divmod(link - local0, a)
            grp, i = divmod(gi, a)
            return f"router {grp * a + i} -> router {grp * a + j} (group {grp})"
        gs, gd = divmod(link - global0, g)
        return f"group {gs} -> group {gd} (router {gs * a + gateway(gs, gd)} -> " \
               f"router {gd * a + gateway(gd, gs)})"

    nl = global0 + g * g
    bw = np.full(nl, float(link_bw))
    bw[global0:] = global_bw
    latency = np.full(nl, float(link_latency))
    latency[global0:] = global_latency
    tier = np.zeros(nl)
    tier[local0:] = 1
    tier[global0:] = 2
    spec = {"kind": "dragonfly", "groups": g, "routers": a, "ranks_per_router": p,
            "link_bw": link_bw, "link_latency": link_latency, "global_bw": global_bw,
            "global_latency": global_latency}
    return Network("dragonfly", n, bw, latency, tier, 5, router, namer, spec)


_FIELDS = {
    "torus": ({"dims", "link_bw"}, {"link_latency"}),
    "fattree": ({"leaves", "ranks_per_leaf", "link_bw"}, {"link_latency", "oversubscription"}),
    "switch": ({"nodes", "ranks_per_node", "link_bw"},
               {"link_latency", "intra_bw", "intra_latency"}),
    "dragonfly": ({"groups", "routers", "ranks_per_router", "link_bw"},
                  {"link_latency", "global_bw", "global_latency"}),
}
_MAKERS = {"torus": torus, "fattree": fattree, "switch": switch, "dragonfly": dragonfly}


def from_spec(spec) -> Network:
    """The network a machine file's ``network`` entry describes, e.g. ``{"kind": "torus",
    "dims": [8, 8], "link_bw": 25, "link_latency": 1e-7}`` (GB/s, seconds); ValueError
    saying what is expected."""
    expected = "; ".join(f"{k}: {', '.join(sorted(need))} (optional {', '.join(sorted(opt))})"
                         for k, (need, opt) in _FIELDS.items())
    if not isinstance(spec, dict) or spec.get("kind") not in _FIELDS:
        raise ValueError(f"network: expected an object with \"kind\" one of {', '.join(KINDS)}, "
                         f"got {spec!r}; fields by kind: {expected}")
    kind = spec["kind"]
    need, optional = _FIELDS[kind]
    given = set(spec) - {"kind"}
    if not need <= given or given - need - optional:
        raise ValueError(f"network of kind {kind!r}: expected fields {', '.join(sorted(need))} "
                         f"and optionally {', '.join(sorted(optional))}; missing "
                         f"{sorted(need - given) or 'none'}, unknown "
                         f"{sorted(given - need - optional) or 'none'}")
    for key in given - {"dims"}:
        value = spec[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"network of kind {kind!r}: {key} must be a number >= 0, "
                             f"got {value!r}")
    fields = {k: v for k, v in spec.items() if k != "kind"}
    try:
        return _MAKERS[kind](**fields)
    except ValueError as e:
        raise ValueError(f"network of kind {kind!r}: {e}") from None
