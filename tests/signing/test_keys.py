from __future__ import annotations

import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from qualify.errors import SigningError
from qualify.signing.keys import (
    PRIVATE_KEY_NAME,
    PUBLIC_KEY_NAME,
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
)


def test_keygen_writes_a_0600_private_key_and_a_matching_public_key(keypair):
    assert keypair.private.name == PRIVATE_KEY_NAME and keypair.public.name == PUBLIC_KEY_NAME
    assert stat.S_IMODE(keypair.private.stat().st_mode) == 0o600
    assert keypair.private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    private, public = load_private_key(keypair.private), load_public_key(keypair.public)
    assert key_id(private.public_key()) == key_id(public)


def test_private_key_is_0600_even_with_a_permissive_umask(tmp_path):
    import os

    old = os.umask(0)
    try:
        paths = generate_keypair(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(paths.private.stat().st_mode) == 0o600


@pytest.mark.parametrize("existing", [PRIVATE_KEY_NAME, PUBLIC_KEY_NAME])
def test_keygen_refuses_to_overwrite(tmp_path, existing):
    (tmp_path / existing).write_text("precious")
    with pytest.raises(SigningError, match=existing.replace(".", r"\.")):
        generate_keypair(tmp_path)
    assert (tmp_path / existing).read_text() == "precious"
    assert len(list(tmp_path.iterdir())) == 1  # and no half pair was written


def test_keygen_twice_refuses_the_second_time(keypair):
    before = keypair.private.read_bytes()
    with pytest.raises(SigningError, match="refusing to overwrite"):
        generate_keypair(keypair.private.parent)
    assert keypair.private.read_bytes() == before


def test_key_id_is_sha256_of_der_spki(private_key):
    import hashlib

    der = private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert key_id(private_key.public_key()) == hashlib.sha256(der).hexdigest()


def test_missing_key_file(tmp_path):
    with pytest.raises(SigningError, match="not found"):
        load_private_key(tmp_path / "nope.pem")
    with pytest.raises(SigningError, match="not found"):
        load_public_key(tmp_path / "nope.pub.pem")


def test_not_a_pem(tmp_path):
    path = tmp_path / "key.pem"
    path.write_bytes(b"\x00\x01 not a key")
    with pytest.raises(SigningError, match="not a PEM"):
        load_private_key(path)
    with pytest.raises(SigningError, match="not a PEM"):
        load_public_key(path)


def test_corrupt_pem_does_not_echo_its_content(tmp_path):
    path = tmp_path / "key.pem"
    path.write_text("-----BEGIN PRIVATE KEY-----\nU0VDUkVUU0VDUkVU\n-----END PRIVATE KEY-----\n")
    with pytest.raises(SigningError, match="readable private key") as info:
        load_private_key(path)
    assert "U0VDUkVU" not in str(info.value)


def test_wrong_algorithm_is_refused(tmp_path):
    ec_key = ec.generate_private_key(ec.SECP256R1())
    private = tmp_path / "ec.pem"
    private.write_bytes(
        ec_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public = tmp_path / "ec.pub.pem"
    public.write_bytes(
        ec_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(SigningError, match="not an Ed25519 key"):
        load_private_key(private)
    with pytest.raises(SigningError, match="not an Ed25519 key"):
        load_public_key(public)


def test_public_and_private_are_not_interchangeable(keypair):
    with pytest.raises(SigningError, match="is a private key"):
        load_public_key(keypair.private)
    with pytest.raises(SigningError, match="is a public key"):
        load_private_key(keypair.public)


def test_encrypted_private_key_is_refused(tmp_path):
    path = tmp_path / "enc.pem"
    path.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    with pytest.raises(SigningError, match="encrypted"):
        load_private_key(path)


def test_repr_of_loaded_key_and_paths_do_not_show_the_secret(keypair):
    pem = keypair.private.read_text()
    body = "".join(pem.splitlines()[1:-1])
    key = load_private_key(keypair.private)
    for text in (repr(key), str(key), repr(keypair)):
        assert body not in text and body[:16] not in text
