"""API keys for the compat APIs (`heed serve --api-keys FILE`): one key a line; blank lines and
lines starting with # are skipped. Without a file every request is let in, as LibreTranslate and a
DeepL-compatible proxy do on a private network."""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path

from heed.errors import HeedError
from heed.plumbing.files import open_regular

MAX_KEYS_FILE = 1 << 20  # bytes: a key file is a list of keys, not a corpus


@dataclass(frozen=True)
class Keys:
    """The accepted keys; none: no key is asked for."""

    accepted: frozenset[str] = frozenset()

    @property
    def required(self) -> bool:
        return bool(self.accepted)

    def accepts(self, key: str | None) -> bool:
        """Whether `key` is one of them (compared in constant time, so timing tells no prefix)."""
        if not self.required:
            return True
        if not key:
            return False
        given = key.encode("utf-8", "surrogatepass")
        return any(hmac.compare_digest(given, k.encode("utf-8")) for k in sorted(self.accepted))


def read_keys(path: Path) -> frozenset[str]:
    """The keys of a --api-keys file; a HeedError naming it when it cannot be read or holds none."""
    try:
        with open_regular(path, "rb") as f:
            data = f.read(MAX_KEYS_FILE + 1)
    except OSError as e:
        raise HeedError(f"--api-keys {path}: cannot read it ({e.strerror or e})") from None
    if len(data) > MAX_KEYS_FILE:
        raise HeedError(f"--api-keys {path}: over {MAX_KEYS_FILE} bytes; give a file of keys, one a line")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeedError(f"--api-keys {path}: not UTF-8 (byte {e.start}); give a file of keys, one a line") from None
    keys = frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))
    if not keys:
        raise HeedError(f"--api-keys {path}: holds no key; write one key a line")
    return keys
