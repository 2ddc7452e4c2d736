"""``pyar model``: predicted times on this machine or on one described (what-if), no MPI.

A machine is the tuning parameters (:mod:`pyar.model.tuner`: a tuning file, a
machine description such as ``machines/gpu_cluster.json``, or the shipped
defaults), changed by flags (``--alpha``/``--bw`` within a node,
``--alpha-inter``/``--bw-inter`` between nodes), on ``--nodes`` nodes of
``--ranks-per-node`` ranks. ``--explain`` prints one algorithm's critical
path event by event; ``--sweep`` prints (``--plot`` draws) the predicted
time against size for several algorithms and rank counts, with the
crossovers, where the fastest changes. A machine file with a ``network``
entry (e.g. ``machines/torus-8x8.json``) routes every message over its links
and charges each step for its most loaded link (:mod:`pyar.model.cost`):
the algorithms are then costed from their schedules, and ``-N`` defaults to
the network's ranks.
"""

from __future__ import annotations

import math

from ..algorithms import builder, msccl, split_names
from ..core.ops import check_dtype
from ..core.schedule import build
from ..core.topology import Topology
from ..model import cost, tuner
from .bench import format_size, parse_size, sizes
from .plot import pyplot

US = 1e6


def machine(args):
    """``(Params, ranks per node or None, nodes or None, where they came from)`` of the
    command line: ``--machine FILE`` (else the tuning file in force), then the flags."""
    if args.machine:
        params, info = tuner.machine(args.machine)
        where = f"{args.machine}" + (f" ({info['description']})" if "description" in info
                                     else "")
    else:
        params, info, where = tuner.parameters(), {}, tuner.source()
    changes = {}
    for flag, field in (("alpha", "alpha"), ("alpha_inter", "alpha_inter")):
        if getattr(args, flag) is not None:
            changes[field] = _positive(getattr(args, flag), flag) / US
    for flag, field in (("bw", "beta"), ("bw_inter", "beta_inter")):
        if getattr(args, flag) is not None:
            changes[field] = 1e-9 / _positive(getattr(args, flag), flag, strict=True)
    if args.bw is not None:
        changes["memory"] = ()      # (measured against the link that --bw replaces)
    if changes:
        params = params._replace(**changes)
        where += " with " + ", ".join(f"--{k.replace('_', '-')}" for k in
                                      ("alpha", "bw", "alpha_inter", "bw_inter")
                                      if getattr(args, k) is not None)
    per_node = args.ranks_per_node or info.get("ranks_per_node")
    nodes = args.nodes or info.get("nodes")
    return params, per_node, nodes, where


def _positive(value, flag, strict=False):
    if not math.isfinite(value) or value < 0 or (strict and value == 0):
        raise ValueError(f"--{flag.replace('_', '-')} must be a number "
                         f"{'> 0' if strict else '>= 0'}, got {value}")
    return value


def rank_counts(args, per_node, nodes, network=None) -> list[int]:
    """``-n`` (a comma list), else ``nodes * ranks per node``, else the network's ranks,
    else 64."""
    if args.nranks:
        try:
            counts = [int(n) for n in str(args.nranks).split(",") if n.strip()]
        except ValueError:
            counts = []
        if not counts or min(counts) < 1:
            raise ValueError(f"--ranks must be ranks >= 1 or a comma list of them, got "
                             f"{args.nranks!r}")
        return counts
    if nodes and per_node:
        return [nodes * per_node]
    return [64 if network is None else network.size]


def _topology(n, per_node):
    return None if not per_node else Topology.regular(n, per_node)


def _where(n, per_node) -> str:
    if not per_node:
        return f"{n} ranks"
    nodes = -(-n // per_node)
    return f"{n} ranks ({nodes} node{'s' if nodes > 1 else ''} of {per_node})"


def _names(args, topology):
    if args.algo == "all":
        return tuner.candidates(args.collective, topology)
    return split_names(args.algo)


def _header(params, dtype, where) -> None:
    far = ""
    if params.links:
        a, b = params.inter()
        far = f"; between nodes alpha {a * US:.3g} us, {1e-9 / b:.3g} GB/s"
    print(f"# parameters: {where}")
    if params.network is not None:
        print(f"# network: {params.network.describe()} ({params.network.size} ranks); each "
              f"step charged for its most loaded link (costed from the schedules)")
    print(f"# alpha {params.alpha * US:.3g} us, beta {params.beta * 1e9:.3g} ns/B "
          f"({1e-9 / params.beta if params.beta else math.inf:.3g} GB/s){far}, "
          f"gamma({dtype}) {params.gamma_of(dtype) * 1e9:.3g} ns/B, "
          f"delta {describe_delta(params)}, eager limit {describe_eager(params)}")
    print(f"# memory terms {describe_memory(params)}")


def describe_delta(params) -> str:
    """The overhead per step, and the buffers that do not pay it, in words."""
    free = f" (none up to a {int(params.resident)} B buffer)" if params.resident else ""
    return f"{params.delta * 1e6:.3g} us per step{free}"


def describe_memory(params) -> str:
    """The memory terms (per byte sent, per byte folded and per step on one node, by buffer
    size), in words."""
    if not params.memory:
        return "none (bytes cost beta and gamma at every size)"
    rows = ", ".join(f"{format_size(int(n))}B {b * 1e9:.3g}/{g * 1e9:.3g}/{d * 1e6:.3g}"
                     for n, b, g, d in params.memory)
    return (f"(one node, buffers above {int(params.resident)} B; by buffer size, ns per byte "
            f"sent/ns per byte folded/us per step): {rows}")


def describe_eager(params) -> str:
    """The eager limit and the rendezvous beyond it, in words."""
    if math.isinf(params.eager):
        return "none"
    return (f"{int(params.eager)} B (then a rendezvous: "
            f"+{params.rendezvous * 1e6:.3g} us a message)")


def main(args) -> int:
    """``pyar model``: see the module docstring."""
    msccl.load_all(args.load)
    dtype = check_dtype(args.dtype)
    params, per_node, nodes, where = machine(args)
    counts = rank_counts(args, per_node, nodes, params.network)
    if args.sweep or args.plot:
        return sweep(args, params, per_node, counts, dtype, where)
    if len(counts) > 1:
        raise ValueError("several rank counts (-n a,b,...) need --sweep")
    n = counts[0]
    nbytes = parse_size(args.bytes)
    if nbytes % dtype.itemsize:
        raise ValueError(f"--bytes must be a multiple of the {dtype} item size "
                         f"({dtype.itemsize}), got {nbytes}")
    count = nbytes // dtype.itemsize
    topology = _topology(n, per_node)
    names = _names(args, topology)
    print(f"# pyar model: {args.collective} of {format_size(nbytes)} ({count} {dtype}) "
          f"on {_where(n, per_node)}")
    _header(params, dtype, where)
    if args.explain:
        for name in names:
            explain(args.collective, name, n, count, dtype, params, topology)
        return 0
    rows = tuner.predictions(args.collective, n, count, dtype, params, names,
                             exact=args.schedule, topology=topology)
    print(f"# {'algorithm':<20}{'time(us)':>12}{'alpha':>11}{'beta':>11}{'gamma':>11}"
          f"{'delta':>11}{'rndv':>11}{'memory':>11}{'messages':>10}{'steps':>7}  from")
    for name, (p, source) in rows.items():
        print(f"  {name:<20}{p.time * US:>12.2f}{p.alpha * US:>11.2f}{p.beta * US:>11.2f}"
              f"{p.gamma * US:>11.2f}{p.delta * US:>11.2f}{p.rendezvous * US:>11.2f}"
              f"{p.memory * US:>11.2f}{p.terms.messages:>10.0f}{p.terms.steps:>7.0f}  {source}")
    if args.algo == "all":
        best = min(sorted(rows), key=lambda k: rows[k][0].time) if rows else "none"
        print(f"# auto picks: {best}")
    return 0


def explain(collective, name, n, count, dtype, params, topology) -> cost.Prediction:
    """Print ``name``'s critical path under the model, event by event, and its totals."""
    schedule = build(collective, name, n, count, builder(name, collective), topology)
    p = cost.predict(schedule, params, dtype, trace=True)
    events = cost.critical_path(p)
    print(f"# critical path of {name}: {len(events)} events; each adds its seconds to the "
          f"one before it (a message starts when both ends have posted it and both ports "
          f"are free)")
    print(f"# {'at(us)':>11} {'+us':>10}  {'term':<6} event")
    for at, what, rank, step, peer, nbytes, seconds, term, why in events:
        if what == "post":
            text = f"rank {rank} posts step {step} ({why})"
        elif what == "fold":
            text = f"rank {rank} step {step} folds {nbytes} B ({why})"
        elif term == "alpha":
            text = f"message rank {rank} step {step} -> rank {peer}: {why}"
        else:
            text = f"  ... {why}"
        print(f"  {at * US:>11.3f} {seconds * US:>10.3f}  {term:<6} {text}")
    t = p.terms
    a, b = params.inter()
    mixed = params.links and topology is not None and len(topology.nodes) > 1
    per = (lambda x, y: "") if mixed else (lambda x, y: f" = {x:.6g} x {y:.6g}")
    print(f"# totals: alpha {p.alpha * US:.3f} us{per(t.messages, params.alpha * US)} "
          f"(messages x us)")
    print(f"#         beta {p.beta * US:.3f} us{per(t.bytes, params.beta * US)} (bytes x us/B)")
    print(f"#         gamma {p.gamma * US:.3f} us = {t.folded:.6g} x "
          f"{params.gamma_of(dtype) * US:.6g} (bytes folded x us/B)")
    local = topology is None or len(topology.nodes) == 1
    beta, folding, step = params.rates(count * dtype.itemsize, params.gamma_of(dtype), local)
    print(f"#         delta {p.delta * US:.3f} us = {t.steps:.0f} x {step * US:.3g} (steps "
          f"posted x us at this buffer size; {describe_delta(params)})")
    print(f"#         rendezvous {p.rendezvous * US:.3f} us ({t.messages:.0f} messages x "
          f"{params.rendezvous * US:.3g} us if they average over the eager limit)")
    print(f"#         memory {p.memory * US:.3f} us = {t.bytes:.6g} x "
          f"{(beta - params.beta) * US:.6g} + {t.folded:.6g} x "
          f"{(folding - params.gamma_of(dtype)) * US:.6g} (bytes and bytes folded x what "
          f"memory adds per byte at this buffer size: {describe_memory(params)})")
    print(f"# total {p.time * US:.3f} us = alpha + beta + gamma + delta + rendezvous + memory")
    return p


def sweep(args, params, per_node, counts, dtype, where) -> int:
    """The predicted time of each algorithm against size at each rank count, the fastest
    marked ``*``, and the crossovers; ``--plot`` draws them."""
    byte_sizes = [b for b in sizes(parse_size(args.minbytes), parse_size(args.maxbytes),
                                   args.stepfactor) if b % dtype.itemsize == 0]
    if not byte_sizes:
        raise ValueError(f"no size in --minbytes..--maxbytes is a multiple of {dtype.itemsize}")
    print(f"# pyar model --sweep: {args.collective}, {dtype}, predicted time in us; "
          f"* the fastest")
    _header(params, dtype, where)
    results = []
    for n in counts:
        topology = _topology(n, per_node)
        names = _names(args, topology)
        table = {name: [] for name in names}
        for nbytes in byte_sizes:
            rows = tuner.predictions(args.collective, n, nbytes // dtype.itemsize, dtype,
                                     params, names, exact=args.schedule, topology=topology)
            for name in names:
                table[name].append(rows[name][0].time)
        best = [min(names, key=lambda k: table[k][i]) for i in range(len(byte_sizes))]
        print(f"# {_where(n, per_node)}")
        print(f"  {'bytes':>8}" + "".join(f"{name:>21}" for name in names) + "  fastest")
        for i, nbytes in enumerate(byte_sizes):
            cells = "".join(f"{table[k][i] * US:>20.2f}{'*' if best[i] == k else ' '}"
                            for k in names)
            print(f"  {format_size(nbytes):>8}{cells}  {best[i]}")
        crossings = crossovers(byte_sizes, best)
        for lo, hi, before, after in crossings:
            print(f"# crossover at {n} ranks: {before} -> {after} between "
                  f"{format_size(lo)} and {format_size(hi)}")
        if not crossings:
            print(f"# no crossover at {n} ranks: {best[0]} is fastest at every size")
        results.append((n, table, crossings))
    if args.plot:
        plot(args.plot, args.collective, dtype, byte_sizes, results, per_node, where)
        print(f"# plot: {args.plot}")
    return 0


def crossovers(byte_sizes, best) -> list[tuple]:
    """``(size before, size after, fastest before, fastest after)`` where the fastest changes."""
    return [(byte_sizes[i - 1], byte_sizes[i], best[i - 1], best[i])
            for i in range(1, len(best)) if best[i] != best[i - 1]]


def plot(path, collective, dtype, byte_sizes, results, per_node, where) -> None:
    """One panel per rank count: time against size per algorithm, log axes, crossovers
    marked by dotted lines at the geometric middle of their interval."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (n, table, crossings) in zip(axes[0], results):
        for name, times in table.items():
            ax.plot(byte_sizes, [t * US for t in times], marker=".", label=name)
        for lo, hi, before, after in crossings:
            x = math.sqrt(lo * hi)
            ax.axvline(x, color="grey", linestyle=":")
            ax.annotate(f"{before}\u2192{after}", (x, ax.get_ylim()[0]), rotation=90,
                        fontsize=7, va="bottom", ha="right")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes")
        ax.set_ylabel("predicted time (us)")
        ax.set_title(f"{collective}, {_where(n, per_node)}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"pyar model --sweep ({dtype}): {where}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
