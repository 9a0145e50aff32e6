"""Child process for the hostile cartridge tests: load one file, report how it went on stdout.

Exit 0 and `loaded` when it loads, exit 3 and `CartridgeError: <message>` when it is refused; anything
else escapes as a traceback (exit 1), which the tests count as a failure. The load's own time is printed
so a test can require a quick refusal separately from torch's import time.
"""

from __future__ import annotations

import sys
import time

from qualify.cartridge.io import load_cartridge
from qualify.errors import CartridgeError

start = time.monotonic()
try:
    load_cartridge(sys.argv[1])
except CartridgeError as exc:
    print(f"seconds: {time.monotonic() - start:.3f}")
    print(f"CartridgeError: {exc}")
    sys.exit(3)
print(f"seconds: {time.monotonic() - start:.3f}")
print("loaded")
