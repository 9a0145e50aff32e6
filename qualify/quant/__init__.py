"""FP8/FP4 fake quantization (`fp8`, `fp4`), the table of KV layouts (`layouts`), applying one to a cartridge
(`apply`) and the raw payload arithmetic (`payload`).

Import the modules themselves: this package's `__init__` stays empty so that reading the layout table (lint,
rendering) never imports torch.
"""
