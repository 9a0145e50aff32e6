"""The table of KV storage layouts: names, bits per side, and which ones a server stores.

The one place layout names are declared: gate-kind fields (`ServedLayoutName`, `ControlLayoutName`), the
quantization in `qualify.quant.apply` and the sign-off page's ordering all read it. Importing it must stay
cheap (no torch): `qualify lint` validates layout names through it.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Literal

from qualify.errors import QualifyError


class UnknownLayoutError(QualifyError, ValueError):
    """A layout name that is none of K16/V16, K16/V8, K8/V16, K8/V8."""


class Layout(Enum):
    """Bits of storage for keys and values; 8 means FP8 E4M3, 16 means the cartridge's 16-bit dtype."""

    K16_V16 = "K16/V16"
    K16_V8 = "K16/V8"
    K8_V16 = "K8/V16"
    K8_V8 = "K8/V8"
    # Not a served layout: FP4 E2M1 keys (with the gate's scaling mode), the loss gate's positive control.
    K4_V16 = "K4/V16"

    @property
    def key_bits(self) -> int:
        return int(self.value.split("/")[0][1:])

    @property
    def value_bits(self) -> int:
        return int(self.value.split("/")[1][1:])

    @property
    def keys_fp8(self) -> bool:
        return self.key_bits == 8

    @property
    def values_fp8(self) -> bool:
        return self.value_bits == 8

    @property
    def is_control(self) -> bool:
        """Only for proving a measurement can see key damage; never a storage format the server uses."""
        return self.key_bits == 4

    @property
    def id(self) -> str:
        """Lowercase id for file names and config keys, e.g. `k16v8`."""
        return self.value.replace("/", "").lower()

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str | Layout) -> Layout:
        """Accept `K16/V8`, `k16v8`, `k16/v8`, `K16_V8` (any case)."""
        if isinstance(text, Layout):
            return text
        key = text.strip().lower().replace("/", "").replace("_", "").replace("-", "")
        for layout in cls:
            if layout.id == key:
                return layout
        known = ", ".join(layout.value for layout in cls)
        raise UnknownLayoutError(f"unknown KV layout {text!r}; known: {known}")


# The layouts a server stores; the control layout is left out of payload tables and accuracy runs.
ALL_LAYOUTS: tuple[Layout, ...] = tuple(layout for layout in Layout if not layout.is_control)
# Names for pydantic fields, built from the table so a layout is added in one place. Type checkers see `str`.
SERVED_LAYOUT_NAMES: tuple[str, ...] = tuple(layout.value for layout in ALL_LAYOUTS)
CONTROL_LAYOUT_NAMES: tuple[str, ...] = tuple(layout.value for layout in Layout)
if TYPE_CHECKING:
    ServedLayoutName = str
    ControlLayoutName = str
else:
    ServedLayoutName = Literal[SERVED_LAYOUT_NAMES]
    # The loss gate's positive control may also use FP4 keys: no server stores them; they visibly damage keys.
    ControlLayoutName = Literal[CONTROL_LAYOUT_NAMES]


def layout_order(name: str) -> tuple[int, str]:
    """Sort key: table order (BF16 first), unknown names last, so tables and plots list layouts alike."""
    names = CONTROL_LAYOUT_NAMES
    return (names.index(name) if name in names else len(names), name)
