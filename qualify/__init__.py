"""cartridge-qualify: qualification gates for shared KV-cache cartridges and the fused kernel that serves them."""

__version__ = "0.1.0"
