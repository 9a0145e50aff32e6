"""Ed25519 signing keys on disk: create them safely, load them with errors a person can act on.

Keys are the plain `cryptography` objects; their repr is `<...Ed25519PrivateKey object at 0x...>`,
and nothing here keeps PEM text around, so no log line or error message can carry the secret.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from qualify.errors import SigningError
from qualify.hashing import sha256_bytes

PRIVATE_KEY_NAME = "signing-key.pem"
PUBLIC_KEY_NAME = "signing-key.pub.pem"


@dataclass(frozen=True)
class KeyPaths:
    private: Path
    public: Path


def key_id(public_key: Ed25519PublicKey) -> str:
    """Hex SHA-256 of the DER SubjectPublicKeyInfo: stable, and the same for any tool that hashes SPKI."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return sha256_bytes(der)


def _create_exclusive(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL: never replace an existing key, and fail (rather than follow) if `path` is a symlink.
    # The mode is applied at creation, so the private key is never readable by others, not even
    # for the moment between creating and chmod-ing it.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError as e:
        raise SigningError(f"{path}: already exists; refusing to overwrite a key") from e
    except OSError as e:
        raise SigningError(f"{path}: cannot create key file: {e.strerror or e}") from e
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), mode)  # the umask may only have narrowed it; make it exact
        f.write(data)


def generate_keypair(out_dir: str | os.PathLike[str]) -> KeyPaths:
    """Write a new Ed25519 key pair to `out_dir` (private 0600, public 0644); never overwrites."""
    out = Path(out_dir)
    paths = KeyPaths(private=out / PRIVATE_KEY_NAME, public=out / PUBLIC_KEY_NAME)
    # Check both first so an existing public key does not leave a fresh, orphaned private key.
    for path in (paths.private, paths.public):
        if path.exists() or path.is_symlink():
            raise SigningError(f"{path}: already exists; refusing to overwrite a key")
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise SigningError(f"{out}: cannot create key directory: {e.strerror or e}") from e

    private_key = Ed25519PrivateKey.generate()
    _create_exclusive(
        paths.private,
        private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        0o600,
    )
    public_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    try:
        _create_exclusive(paths.public, public_pem, 0o644)
    except SigningError:
        paths.private.unlink()  # lost a race for the public file: leave no half-made pair behind
        raise
    return paths


# An Ed25519 PEM is about 120 bytes; anything near this size is not a key, and reading it must stay cheap.
_MAX_PEM_BYTES = 64 << 10


def _read_pem(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as fh:
            data = fh.read(_MAX_PEM_BYTES + 1)
    except FileNotFoundError as e:
        raise SigningError(f"{path}: {what} file not found") from e
    except OSError as e:
        raise SigningError(f"{path}: cannot read {what}: {e.strerror or e}") from e
    if len(data) > _MAX_PEM_BYTES:
        raise SigningError(f"{path}: {what} file is larger than {_MAX_PEM_BYTES >> 10} KiB; not a PEM key")
    if b"-----BEGIN " not in data:
        raise SigningError(f"{path}: not a PEM file (expected a '-----BEGIN ...' block)")
    return data


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Load an unencrypted PKCS8 PEM Ed25519 private key."""
    path = Path(path)
    data = _read_pem(path, "private key")
    # Messages below are our own: the PEM content must never reach an exception or a log.
    if b"PUBLIC KEY-----" in data:
        raise SigningError(f"{path}: is a public key; signing needs the private key ({PRIVATE_KEY_NAME})")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as e:
        raise SigningError(f"{path}: private key is encrypted; provide it unencrypted") from e
    except (ValueError, UnsupportedAlgorithm) as e:
        raise SigningError(f"{path}: PEM does not hold a readable private key") from e
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path}: is not an Ed25519 key ({type(key).__name__})")
    return key


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """Load a PEM Ed25519 public key (SubjectPublicKeyInfo).

    A private key is refused rather than reduced to its public half: verifying must never need the
    secret, and accepting it here would invite copying the private key to every place that verifies.
    """
    path = Path(path)
    data = _read_pem(path, "public key")
    if b"PRIVATE KEY-----" in data:
        raise SigningError(
            f"{path}: is a private key; verify with the public key ({PUBLIC_KEY_NAME}), "
            "so the secret need not be present where reports are checked"
        )
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as e:
        raise SigningError(f"{path}: PEM does not hold a readable public key") from e
    if not isinstance(key, Ed25519PublicKey):
        raise SigningError(f"{path}: is not an Ed25519 key ({type(key).__name__})")
    return key
