"""CRC-32C, the checksum Secret Manager verifies payloads with: computed by the real client's
caller (`gcp/secrets.py`) and checked by the emulator (`sim/secret_manager.py`), so both
backends share this one copy."""

from __future__ import annotations


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C of `data` (tokens and secrets are small: a table in pure Python is enough)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
