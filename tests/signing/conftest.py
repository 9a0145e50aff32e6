from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from qualify.signing.keys import KeyPaths, generate_keypair


@pytest.fixture
def private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
def keypair(tmp_path) -> KeyPaths:
    return generate_keypair(tmp_path / "keys")
