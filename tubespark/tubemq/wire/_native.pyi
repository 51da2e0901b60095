# Typing stub of the compiled twin built from _native.c (see tubespark/tubemq/wire/fetch.py).
from typing_extensions import Buffer

def scan_fetch(data: Buffer, /) -> tuple[bool, int, str, int, int, int] | None: ...
def decode_fetch(
    data: Buffer, start: int, step: int, verify: bool, /
) -> tuple[int, bytes, bytes, bytes, bytes, bytes, list[bytes]] | None: ...
