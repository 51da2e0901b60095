# Typing stub of the compiled twin built from _native.c (see tubespark/tubemq/wire/fetch.py).
from typing import Any

from typing_extensions import Buffer

def scan_fetch(data: Buffer, /) -> tuple[bool, int, str, int, int, int] | None: ...
def decode_fetch(
    data: Buffer, start: int, step: int, verify: bool, count: int = -1, /
) -> tuple[int, bytes, bytes, bytes, bytes, bytes, list[bytes]] | None: ...
def decode_response(payload: Buffer, /) -> tuple[int, bytes] | None: ...
def encode_send(
    client_id: str, topic: str, partition_id: int, data: Buffer, flag: int, checksum: int, sent_addr: int,
    msg_type: str | None, msg_time: str | None, auth: tuple[int, str] | None,
    method: int, service_type: int, protocol_ver: int, timeout_ms: int, /
) -> bytes: ...
def encode_send_frames(
    requests: list[tuple[str, str, int, bytes, int, int, int, str, str]], serials: list[int],
    auth: tuple[int, str] | None, method: int, service_type: int, protocol_ver: int, timeout_ms: int,
    begin_token: int, max_block_size: int, max_blocks: int, /
) -> bytes: ...
def decode_send_answer(data: Buffer, /) -> tuple[bool, int, str, int, int, int] | None: ...
def build_requests(
    request_type: type, client_id: str, topic: str, sent_addr: int, payloads: list[bytes], partition_ids: list[int],
    flags: list[int] | None, msg_types: list[str] | None, msg_times: list[str] | None, /
) -> list[Any]: ...
