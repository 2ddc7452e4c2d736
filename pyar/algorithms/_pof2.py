"""MPICH's fold of a non-power-of-two rank count onto the largest power of two below it.

With ``size = pof2 + rem``, the first ``2*rem`` ranks pair up: each even rank
hands its data to the odd rank after it (``before``), which stands for both
in the power-of-two algorithm; afterwards the odd rank hands the even rank
its result (``after``). The other ranks take part directly. Costs the
``2*rem`` paired ranks two extra steps.
"""

from __future__ import annotations

from typing import NamedTuple

from ..core.schedule import Chunk, Recv, Send, compact


class Fold(NamedTuple):
    pof2: int
    rem: int
    newrank: int            # rank among the pof2 participants; -1 for a folded-away rank
    before: list            # op lists before the power-of-two algorithm
    after: list             # op lists after it

    def real(self, newrank: int) -> int:
        """The communicator rank of power-of-two participant ``newrank``."""
        return newrank * 2 + 1 if newrank < self.rem else newrank + self.rem

    def first(self, newrank: int) -> int:
        """The lowest communicator rank participant ``newrank`` stands for."""
        return newrank * 2 if newrank < self.rem else newrank + self.rem

    def bounds(self, edges: list[int]) -> list[int]:
        """Participants' block edges from the ranks' ``edges`` (a pair's blocks merge)."""
        return [edges[self.first(v)] for v in range(self.pof2)] + [edges[-1]]


def fold(rank: int, size: int, before, after, reduce: bool = True) -> Fold:
    """The fold of ``rank``: the pair's even rank sends ``before`` (folded in if ``reduce``,
    else copied) and receives ``after``; chunks are those of this rank's pair."""
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    if rank >= 2 * rem:
        return Fold(pof2, rem, rank - rem, [], [])
    if rank % 2 == 0:
        return Fold(pof2, rem, -1, [[Send(rank + 1, before)]], [[Recv(rank + 1, after)]])
    return Fold(pof2, rem, rank // 2, [[Recv(rank - 1, before, reduce=reduce)]],
                [[Send(rank - 1, after)]])


def around(f, middle) -> list:
    """This rank's whole schedule around a power-of-two algorithm: the fold ``f``'s
    ``before``, then the steps ``middle()`` gives (not called on a folded-away rank), then
    its ``after``, compacted. ``f`` is a :class:`Fold` or any fold with those fields."""
    return compact([*f.before, *(middle() if f.newrank >= 0 else ()), *f.after])


def pair_block(rank: int, edges: list[int]):
    """The block of the even rank of ``rank``'s fold pair: what a pair hands over alone."""
    even = rank & ~1
    return Chunk("data", edges[even], edges[even + 1])
