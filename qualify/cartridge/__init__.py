"""Cartridge artifacts: trained KV-cache prefixes, their manifests and validation."""

from qualify.cartridge.io import load_cartridge, save_cartridge
from qualify.cartridge.manifest import (
    CartridgeManifest,
    build_manifest,
    check_against_manifest,
    load_verified_cartridge,
    read_manifest,
    write_manifest,
)
from qualify.cartridge.types import Cartridge, ModelKVShape
from qualify.cartridge.validate import validate_cartridge

__all__ = [
    "Cartridge",
    "CartridgeManifest",
    "ModelKVShape",
    "build_manifest",
    "check_against_manifest",
    "load_cartridge",
    "load_verified_cartridge",
    "read_manifest",
    "save_cartridge",
    "validate_cartridge",
    "write_manifest",
]
