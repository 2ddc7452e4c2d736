"""MPICH's fold of a non-power-of-two rank count onto the largest power of two below it.

With ``size = pof2 + rem``, the first ``2*rem`` ranks pair up: each even rank
hands its whole buffer to the odd rank after it, which folds it in and stands
for both in the power-of-two algorithm; afterwards the odd rank hands the
result back. The other ranks take part directly. Costs the ``2*rem`` paired
ranks two extra steps and ``M`` extra bytes sent each.
"""

from __future__ import annotations

from typing import NamedTuple

from ..schedule import Chunk, Recv, Send


class Fold(NamedTuple):
    pof2: int
    rem: int
    newrank: int            # rank among the pof2 participants; -1 for a folded-away rank
    before: list            # op lists before the power-of-two algorithm
    after: list             # op lists after it

    def real(self, newrank: int) -> int:
        """The communicator rank of power-of-two participant ``newrank``."""
        return newrank * 2 + 1 if newrank < self.rem else newrank + self.rem


def fold(rank: int, size: int, count: int) -> Fold:
    """The fold of ``rank``; its ``before``/``after`` move the whole buffer ``[0, count)``."""
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    everything = Chunk("data", 0, count)
    if rank >= 2 * rem:
        return Fold(pof2, rem, rank - rem, [], [])
    if rank % 2 == 0:
        return Fold(pof2, rem, -1, [[Send(rank + 1, everything)]], [[Recv(rank + 1, everything)]])
    return Fold(pof2, rem, rank // 2, [[Recv(rank - 1, everything, reduce=True)]],
                [[Send(rank - 1, everything)]])
