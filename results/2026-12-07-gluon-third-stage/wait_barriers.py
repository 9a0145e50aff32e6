"""Triton 3.6's Gluon also puts a CTA barrier (``bar.sync``) before an ``mbarrier.wait`` on an allocation that was
waited on since the last barrier: its barrier analysis takes a wait for a write of the barrier's allocation (all of
it, whichever index). Built for SM90 without a GPU, this prints the PTX loop of a kernel
that waits on two allocations in turn, each indexed by the trip: one ``bar.sync`` per trip, before the first wait
(the second allocation's wait follows that barrier). In the prefill's consumer loop the K stages' "ready" wait is
such a wait (results/2026-12-07-gluon-q-tma-h100/arrive_barriers.py shows the arrive's own barrier).

    python3 wait_barriers.py        (in a venv with triton==3.6.0)
"""

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.hopper import mbarrier


@gluon.jit
def two_waits_per_trip(x, n):
    a = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    b = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(2):
        mbarrier.init(a.index(s), count=1)
        mbarrier.init(b.index(s), count=1)
    gl.thread_barrier()  # the inits are behind a barrier before the loop
    for i in range(n):
        mbarrier.wait(a.index(i % 2), i & 1)
        mbarrier.wait(b.index(i % 2), i & 1)


src = GluonASTSource(two_waits_per_trip, {"x": "*fp32", "n": "i32"}, constexprs={}, attrs={})
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 128), options={"num_warps": 4}).asm["ptx"]
lines = [s.strip() for s in ptx.splitlines()]
start = next(i for i, s in enumerate(lines) if s.startswith("$L__BB0_2"))
for line in lines[start:]:
    if line.startswith(("bar.", "$L__BB", "@%p")) or "mbarrier" in line:
        print(line)
    if line.startswith("$L__BB0_3"):
        break
