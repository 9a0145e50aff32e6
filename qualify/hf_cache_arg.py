"""The name of the KV-cache keyword in this transformers release.

transformers 5.2x renamed `past_key_values` to `cache` (forward arguments and outputs) and warns with a
FutureWarning on every call that uses the old name; 5.17, the GPU image's release, knows only the old one.
Each call site asks here instead of pinning one spelling.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any


@cache
def _takes_cache(forward_owner: type) -> bool:
    return "cache" in inspect.signature(forward_owner.forward).parameters


def cache_kwargs(module: Any, kv_cache: Any) -> dict[str, Any]:
    """`{keyword: kv_cache}` for `module(...)`, under the keyword its forward takes."""
    return {"cache" if _takes_cache(type(module)) else "past_key_values": kv_cache}


def output_cache(output: Any) -> Any:
    """The cache a forward returned, under either name."""
    fields = getattr(output, "__dataclass_fields__", {})
    return output.cache if "cache" in fields else output.past_key_values
