# python benchmarks/sim_1024_reduce_scatter.py
"""bine reduce_scatter at 1,024 ranks: the schedule's build and the simulation, CPU s (what
pyar sim's build s and sim s columns measure), and the result checked against one sum (pyar
sim's own reference for reduce_scatter is quadratic in the ranks)."""
import time

import numpy as np

import pyar
from pyar.cli.sim import samples
from pyar.collectives import block

n, count = 1024, 1024 * 64
x = samples(n, count, "float32", "sum")
total = x.astype(np.float64).sum(axis=0)
t0 = time.process_time()
s = pyar.schedule("bine", n, count, collective="reduce_scatter")
s.table()
t1 = time.process_time()
out = pyar.simulate(s, x).outputs
t2 = time.process_time()
bad = sum(not np.allclose(o, total[block(count, n, r)], rtol=1e-4, atol=1e-3)
          for r, o in enumerate(out))
st = pyar.simulate(s, "float32", data=False).stats
print(f"build {t1 - t0:.1f} s, sim {t2 - t1:.1f} s CPU; steps {max(q.steps for q in st)}, "
      f"max sent {max(q.bytes_sent for q in st)}, messages {sum(q.messages for q in st)}, "
      f"ranks wrong {bad}")
