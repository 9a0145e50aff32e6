"""The built-in gate kinds: each module declares its fields and names its runner (imported lazily)."""

from qualify.kinds.accuracy_floor import ACCURACY_FLOOR
from qualify.kinds.kernel_numerics import KERNEL_NUMERICS
from qualify.kinds.loss_increase import LOSS_INCREASE
from qualify.kinds.perf_nonregression import PERF_NONREGRESSION

BUILTIN_KINDS = (LOSS_INCREASE, ACCURACY_FLOOR, KERNEL_NUMERICS, PERF_NONREGRESSION)

__all__ = ["BUILTIN_KINDS"]
