"""Triton 3.6's Gluon puts a CTA barrier (``bar.sync``) before every ``mbarrier.arrive``, even one right after
another arrive and on another allocation: built for SM90 without a GPU, this prints the PTX's barriers, arrives and
memory accesses of a kernel that arrives three times.

    python3 arrive_barriers.py        (in a venv with triton==3.6.0)
"""

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.hopper import mbarrier


@gluon.jit
def three_arrivals(x):
    a = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    b = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(a.index(0), count=1)
    mbarrier.init(b.index(0), count=1)
    offs = gl.arange(0, 128, gl.BlockedLayout([1], [32], [4], [0]))
    v = gl.load(x + offs)
    mbarrier.arrive(a.index(0), count=1)
    mbarrier.arrive(b.index(0), count=1)  # another allocation, right after
    gl.store(x + offs, v + 1)
    mbarrier.arrive(a.index(0), count=1)


src = GluonASTSource(three_arrivals, {"x": "*fp32"}, constexprs={}, attrs={})
ptx = triton.compile(src, target=GPUTarget("cuda", 90, 128), options={"num_warps": 4}).asm["ptx"]
for line in (s.strip() for s in ptx.splitlines()):
    if line.startswith(("bar.", "ld.global", "st.global")) or "mbarrier" in line:
        print(line)
