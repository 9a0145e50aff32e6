"""Cartridge artifacts: trained KV-cache prefixes, their manifests and validation."""

from qualify.cartridge.types import Cartridge, ModelKVShape

__all__ = ["Cartridge", "ModelKVShape"]
