"""Ogg/Opus, as much as the stand-ins need: what Polly's `ogg_opus` output is (pages with their
CRC, an OpusHead and an OpusTags header, then audio packets) and the check the Graph stand-in
makes of a voice note (RFC 3533: the Ogg page; RFC 7845: Opus in Ogg). No audio is encoded:
the packets are silence-sized filler, their number following the text's length."""

from __future__ import annotations

import struct

_POLY = 0x04C11DB7


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ _POLY) if crc & 0x80000000 else (crc << 1)
        table.append(crc & 0xFFFFFFFF)
    return table


_TABLE = _crc_table()


def _crc(data: bytes) -> int:
    """Ogg's CRC-32 (RFC 3533: polynomial 0x04c11db7, not reflected, initial value 0)."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _TABLE[((crc >> 24) & 0xFF) ^ byte]
    return crc


def _page(
    packet: bytes, *, sequence: int, granule: int, flags: int, serial: int = 0x0A11CE
) -> bytes:
    segments = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = struct.pack(
        "<4sBBqIIIB", b"OggS", 0, flags, granule, serial, sequence, 0, len(segments)
    )
    page = header + bytes(segments) + packet
    crc = _crc(page)
    return page[:22] + struct.pack("<I", crc) + page[26:]


def voice_note(text: str) -> bytes:
    """An Ogg/Opus stream as long as `text` spoken (about 15 characters a second)."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 48_000, 0, 0)
    # the words go in a comment, so the Graph stand-in can tell what a voice note says (the
    # tests' check that nothing of one person reaches another holds for voice notes too)
    said = f"SPOKEN={text}".encode()
    tags = b"OpusTags" + struct.pack("<I", 6) + b"devstk" + struct.pack("<II", 1, len(said)) + said
    pages = [
        _page(head, sequence=0, granule=0, flags=0x02),
        _page(tags, sequence=1, granule=0, flags=0),
    ]
    seconds = max(1, len(text) // 15)
    for second in range(seconds):
        last = second == seconds - 1
        # 50 frames of 20 ms: one second at 48 kHz; 0xF8 is a 20 ms CELT TOC byte
        packet = bytes([0xF8, 0xFF, 0xFE])
        pages.append(
            _page(
                packet * 50,
                sequence=2 + second,
                granule=(second + 1) * 48_000,
                flags=0x04 if last else 0,
            )
        )
    return b"".join(pages)


def spoken(data: bytes) -> str | None:
    """The words `voice_note` put in a stream's OpusTags comment, if any."""
    found = data.find(b"OpusTags")
    marker = data.find(b"SPOKEN=", found)
    if found < 0 or marker < 0:
        return None
    (length,) = struct.unpack("<I", data[marker - 4 : marker])
    return data[marker + 7 : marker + length].decode("utf-8", "replace")


def opus_seconds(data: bytes) -> float | None:
    """The length in seconds of an Ogg/Opus stream (its last page's granule position, at
    48 kHz), or None if it is not one: pages that do not parse or fail their CRC, or a first
    packet that is no OpusHead."""
    at, granule, first = 0, 0, None
    while at < len(data):
        if data[at : at + 4] != b"OggS" or len(data) < at + 27:
            return None
        count = data[at + 26]
        table = data[at + 27 : at + 27 + count]
        size = 27 + count + sum(table)
        page = data[at : at + size]
        if len(page) < size:
            return None
        crc = struct.unpack("<I", page[22:26])[0]
        if _crc(page[:22] + b"\0\0\0\0" + page[26:]) != crc:
            return None
        body = page[27 + count :]
        first = body if first is None else first
        granule = struct.unpack("<q", page[6:14])[0]
        at += size
    if first is None or not first.startswith(b"OpusHead"):
        return None
    return granule / 48_000
