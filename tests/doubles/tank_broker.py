"""A TANK broker for tests: a TEST DOUBLE, because no real TANK broker can be had here.

TANK exists only as C++ source (phaistos-networks/TANK v4); neither this project's tests nor CI can
build or run it (docs/tank/protocol.md, "The test double"). This server follows the facts of
``docs/tank/protocol.md``, which were confirmed against a live TANK v4 broker, and nothing more:

* frames ``msgId:u8 | len:u32 | payload``, little-endian; a Ping the moment a connection is accepted,
  and with :attr:`TankBroker.ping_between` a Ping before every response (clients must skip them);
* requests pipeline and are answered by request id; a fetch that long-polls runs on its own thread,
  so a produce sent after it on the same connection is answered while it waits (and the fetch then
  returns the new message);
* storage is what a producer sent: each partition is a log of ``varint length + bundle`` exactly as
  received, with an index of (byte offset, first seq, last seq, sparse); a new partition's first
  message is 1; plain bundles are numbered from the high-water mark + 1, sparse bundles (0x5, or
  0x1 carrying the sparse flag) keep their own numbers and leave gaps; Snappy bundles are stored as sent;
* fetch: seq 0 = first available, UINT64_MAX = high-water mark + 1, a request for high-water mark + 1
  long-polls up to ``maxWait`` (answered early by new data with at least ``minBytes``), above that or
  below the first available number is a boundary fault 0x01 carrying the first available number;
  **a chunk starts at the boundary of the bundle holding the requested number** (or the next bundle
  when the number falls in a sparse gap) and **extends to whole bundles until it reaches fetchSize, so
  it can be larger than fetchSize**; ``0xFE`` replaces the base when that first bundle is sparse; with
  :attr:`TankBroker.cut_chunks` the chunk is instead cut at exactly ``fetchSize`` bytes, so **its last
  bundle is partial** (the protocol allows it; the v4 broker was not seen doing it);
* produce codes 0x00, 0x01 (unknown partition), 0x0A (sequence numbers not above the high-water mark,
  0x5), 0xFE (read-only, one byte for the whole topic), 0xFF (unknown topic, one byte for the whole
  topic); any code, 0xFC with its endpoint included, can be injected with :meth:`TankBroker.inject_produce`;
  fetch codes 0xFF (unknown partition), 0xFFFF topic mark, and injected 0xFB/0xFC/0xFD;
* DiscoverPartitions (first available and high-water mark; a partition that never held a message answers
  first = 0, high-water mark 0, as the v4 broker does; fetches still number its first message 1),
  CreateTopic (codes 0, 1, 4, 10), DiscoverTopics and Status (standalone, version 400).

It parses and writes bytes with its own code here, never with ``tubespark.tank.wire``, so a mistake in
the connector's codec cannot be mirrored by the broker it is tested against. Test hooks: seed bundles
directly (:meth:`append_bundle`), retention (:meth:`drop_before`), connection faults (:meth:`fault`:
``reset`` or ``silent`` for the next requests of a type), :meth:`restart` (same port, data kept), and
``requests`` counting what arrived by type. Every socket has a timeout and every thread is a daemon.

Run alone (the bench does): ``python -m tests.doubles.tank_broker --topic events:4`` prints its address.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

PRODUCE, CONSUME, PING, PRODUCE_SEQ, DISCOVER_PARTITIONS, CREATE_TOPIC, STATUS, DISCOVER_TOPICS = (
    0x1, 0x2, 0x3, 0x5, 0x6, 0x7, 0xA, 0xB)
U64_MAX = (1 << 64) - 1
MAX_REQUEST = 256 * 1024 * 1024
MAX_WAIT_CAP_S = 30.0
CONFIG_KEYS = {"retention.segments.count", "log.retention.secs", "log.retention.bytes", "log.segment.bytes",
               "log.roll.secs", "log.roll.jitter.secs", "log.cleanup.policy", "flush.messages", "flush.secs",
               "log.index.interval.bytes", "log.index.size.max.bytes"}


class _Reader:
    """Little-endian fields from one request payload (its own code: not the connector's Cursor)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("request shorter than its fields")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def str8(self) -> str:
        return self.take(self.u8()).decode()

    def varint(self) -> int:
        value, shift = 0, 0
        for _ in range(5):
            b = self.u8()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise ValueError("bad varint")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _str8(text: str) -> bytes:
    raw = text.encode()
    return bytes([len(raw)]) + raw


def _endpoint(address: str) -> bytes:
    host, port = address.rsplit(":", 1)
    return socket.inet_aton(host) + struct.pack("<H", int(port))


def bundle_seqs(bundle: bytes) -> tuple[int, bool, int | None, int | None]:
    """``(count, sparse, first, last)`` from a bundle's header (first/last only for a sparse one)."""
    r = _Reader(bundle)
    flags = r.u8()
    if flags & 0x80 or flags & 0x3 > 1:
        raise ValueError(f"bundle flags 0x{flags:02x} are not valid")
    count = (flags >> 2) & 0xF or r.varint()
    if count == 0:
        raise ValueError("a bundle without messages")
    if not flags & 0x40:
        return count, False, None, None
    first = r.u64()
    last = first + r.varint() + 1 if count > 1 else first
    return count, True, first, last


@dataclass
class _Entry:
    offset: int  # byte offset of the bundle's length varint in the log
    end: int
    first: int
    last: int
    sparse: bool


@dataclass
class _Partition:
    log: bytearray = field(default_factory=bytearray)
    entries: list[_Entry] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)
    hw: int = 0  # last assigned sequence number (0: nothing yet)
    dropped_below: int = 0  # retention: numbers below this are gone even with no bundle left

    @property
    def first_available(self) -> int:
        if self.entries:
            return self.entries[0].first
        return max(self.hw + 1, self.dropped_below, 1)

    @property
    def reported_first(self) -> int:
        """The first available number DiscoverPartitions answers: 0 for a partition that never held a message
        (seen on a live v4 broker; the reader treats 0 and 1 alike there)."""
        if not self.entries and self.hw == 0 and self.dropped_below == 0:
            return 0
        return self.first_available

    def append(self, bundle: bytes, base: int | None) -> int:
        """Store ``bundle`` (numbered from ``base``, or hw + 1); returns 0 or the produce error code."""
        count, sparse, first, last = bundle_seqs(bundle)
        if sparse:
            assert first is not None and last is not None
            if base is not None and base > first:
                return 0x0A
        else:
            first = self.hw + 1 if base is None else base
            last = first + count - 1
        if first <= self.hw:
            return 0x0A
        offset = len(self.log)
        self.log += _varint(len(bundle)) + bundle
        self.entries.append(_Entry(offset, len(self.log), first, last, sparse))
        self.firsts.append(first)
        self.hw = last
        return 0

    def chunk(self, seq: int, fetch_size: int, cut: bool) -> tuple[_Entry | None, bytes]:
        """The chunk for a fetch from ``seq`` (already checked to lie within [first available, hw])."""
        idx = max(0, bisect.bisect_right(self.firsts, seq) - 1)
        if idx < len(self.entries) and self.entries[idx].last < seq:
            idx += 1  # in a sparse gap: the next bundle
        if idx >= len(self.entries):
            return None, b""
        start = self.entries[idx].offset
        if cut:
            return self.entries[idx], bytes(self.log[start:start + fetch_size])
        end = self.entries[idx].end
        j = idx + 1
        while end - start < fetch_size and j < len(self.entries):
            end = self.entries[j].end
            j += 1
        return self.entries[idx], bytes(self.log[start:end])


class TankBroker:
    """The double. ``topics``: ``{name: partition count}``. Start with :meth:`start`, or use ``with``."""

    def __init__(self, topics: dict[str, int] | None = None, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.topics: dict[str, list[_Partition]] = {t: [_Partition() for _ in range(n)]
                                                    for t, n in (topics or {}).items()}
        self.cut_chunks = False
        self.ping_between = False
        self.read_only = False
        self.requests: Counter[int] = Counter()
        self.fetch_sizes: list[int] = []
        self.started_at = int(time.time())
        self._lock = threading.Condition()
        self._produce_faults: dict[tuple[str, int], list[tuple[int, str | None]]] = {}
        self._fetch_faults: dict[tuple[str, int], list[tuple[int, str | None]]] = {}
        self._conn_faults: dict[int, list[str]] = {}
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._running = threading.Event()

    # --- life cycle ---------------------------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> TankBroker:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 5.0
        while True:  # a restart on the same port: the old listener's accept thread may not have let go yet
            try:
                listener.bind((self.host, self.port))
                break
            except OSError:
                if not self.port or time.monotonic() > deadline:
                    listener.close()
                    raise
                time.sleep(0.05)
        listener.listen(64)
        listener.settimeout(0.2)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._running.set()
        threading.Thread(target=self._accept_loop, args=(listener,), name="tank-double-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the listener and every connection (clients see resets); the data stays."""
        self._running.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
            self._lock.notify_all()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def restart(self, down_s: float = 0.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()

    def __enter__(self) -> TankBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- test hooks ---------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        with self._lock:
            self.topics.setdefault(name, [_Partition() for _ in range(partitions)])

    def append_bundle(self, topic: str, partition: int, bundle: bytes, base: int | None = None) -> None:
        """Store a bundle as if produced (``base``: as ProduceWithSeqnum's baseSeqNum)."""
        with self._lock:
            code = self.topics[topic][partition].append(bundle, base)
            if code:
                raise ValueError(f"the double refused the bundle: code 0x{code:02x}")
            self._lock.notify_all()

    def high_water_mark(self, topic: str, partition: int) -> int:
        with self._lock:
            return self.topics[topic][partition].hw

    def drop_before(self, topic: str, partition: int, seq: int) -> None:
        """Retention: remove the bundles wholly below ``seq`` (their bytes stay in the log, unreachable)."""
        with self._lock:
            part = self.topics[topic][partition]
            keep = [e for e in part.entries if e.last >= seq]
            part.entries, part.firsts = keep, [e.first for e in keep]
            part.dropped_below = max(part.dropped_below, seq)

    def lose_after(self, topic: str, partition: int, seq: int) -> None:
        """A crash that lost acknowledged messages: the bundles above ``seq`` (a bundle boundary) are gone and
        their numbers are given to the next ones produced (their bytes stay in the log, unreachable)."""
        with self._lock:
            part = self.topics[topic][partition]
            keep = [e for e in part.entries if e.last <= seq]
            part.entries, part.firsts = keep, [e.first for e in keep]
            part.hw = keep[-1].last if keep else 0

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            self.topics.pop(topic, None)

    def inject_produce(self, topic: str, partition: int, code: int, times: int = 1, leader: str | None = None) -> None:
        with self._lock:
            self._produce_faults.setdefault((topic, partition), []).extend([(code, leader)] * times)

    def inject_fetch(self, topic: str, partition: int, code: int, times: int = 1, leader: str | None = None) -> None:
        with self._lock:
            self._fetch_faults.setdefault((topic, partition), []).extend([(code, leader)] * times)

    def fault(self, msg_id: int, kind: str, times: int = 1) -> None:
        """The next ``times`` requests of type ``msg_id``: ``reset`` closes the connection instead of
        answering, ``silent`` never answers (the connection stays open)."""
        if kind not in ("reset", "silent"):
            raise ValueError(kind)
        with self._lock:
            self._conn_faults.setdefault(msg_id, []).extend([kind] * times)

    # --- serving ------------------------------------------------------------------------------

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._running.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(60)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="tank-double-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        send_lock = threading.Lock()

        def send(msg_id: int, payload: bytes) -> None:
            frame = bytes([msg_id]) + struct.pack("<I", len(payload)) + payload
            if self.ping_between and msg_id != PING:
                frame = bytes([PING, 0, 0, 0, 0]) + frame
            with send_lock, contextlib.suppress(OSError):
                conn.sendall(frame)

        try:
            send(PING, b"")  # the greeting
            buf = bytearray()
            while self._running.is_set():
                while len(buf) < 5 or len(buf) < 5 + struct.unpack_from("<I", buf, 1)[0]:
                    if len(buf) >= 5 and struct.unpack_from("<I", buf, 1)[0] > MAX_REQUEST:
                        return
                    try:
                        data = conn.recv(1 << 20)
                    except TimeoutError:
                        continue
                    if not data:
                        return
                    buf += data
                msg_id, length = buf[0], struct.unpack_from("<I", buf, 1)[0]
                payload = bytes(buf[5:5 + length])
                del buf[:5 + length]
                with self._lock:
                    self.requests[msg_id] += 1
                    faults = self._conn_faults.get(msg_id)
                    fault = faults.pop(0) if faults else None
                if fault == "reset":
                    return
                if fault == "silent":
                    continue
                if msg_id == PING:
                    continue
                if not self._handle(msg_id, payload, send):
                    return
        except (OSError, ValueError, struct.error, UnicodeDecodeError):
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _handle(self, msg_id: int, payload: bytes, send) -> bool:
        r = _Reader(payload)
        if msg_id == CONSUME:
            threading.Thread(target=self._fetch, args=(r, send), daemon=True).start()
        elif msg_id in (PRODUCE, PRODUCE_SEQ):
            answer = self._produce(r, msg_id == PRODUCE_SEQ)
            if answer is None:
                return False
            send(PRODUCE, answer)
        elif msg_id == DISCOVER_PARTITIONS:
            send(msg_id, self._discover_partitions(r))
        elif msg_id == CREATE_TOPIC:
            send(msg_id, self._create_topic(r))
        elif msg_id == DISCOVER_TOPICS:
            rid = r.u32()
            r.u8()
            with self._lock:
                body = b"".join(_str8(t) + bytes([1]) + struct.pack("<H", len(p))
                                for t, p in sorted(self.topics.items()))
                send(msg_id, struct.pack("<IIB", rid, len(self.topics), 0) + body)
        elif msg_id == STATUS:
            rid = r.u32()
            with self._lock:
                parts = sum(len(p) for p in self.topics.values())
                send(msg_id, struct.pack("<IBBIIIIII", rid, 0, 0, len(self.topics), parts, parts, 0,
                                         self.started_at, 400))
        else:
            return False  # an unknown request: a real broker drops the connection
        return True

    def _produce(self, r: _Reader, with_seq: bool) -> bytes | None:
        r.u16()
        rid = r.u32()
        r.str8()
        r.u8()
        r.u32()
        out = bytearray(struct.pack("<I", rid))
        with self._lock:
            for _ in range(r.u8()):
                topic = r.str8()
                count = r.u8()
                items = []
                for _ in range(count):
                    pid = r.u16()
                    length = r.varint()
                    base = r.u64() if with_seq else None
                    items.append((pid, base, r.take(length)))
                parts = self.topics.get(topic)
                if parts is None or self.read_only:
                    out.append(0xFF if parts is None else 0xFE)
                    continue
                for pid, base, bundle in items:
                    injected = self._produce_faults.get((topic, pid))
                    if injected:
                        code, leader = injected.pop(0)
                        out.append(code)
                        if code == 0xFC:
                            out += _endpoint(leader or "127.0.0.1:1")
                        continue
                    if pid >= len(parts):
                        out.append(0x01)
                        continue
                    try:
                        out.append(parts[pid].append(bundle, base))
                    except ValueError:
                        return None  # a malformed bundle: drop the connection
            self._lock.notify_all()
        return bytes(out)

    def _fetch(self, r: _Reader, send) -> None:
        try:
            r.u16()
            rid = r.u32()
            r.str8()
            max_wait_ms = r.u64()
            min_bytes = r.u32()
            wanted = []
            for _ in range(r.u8()):
                topic = r.str8()
                wanted.append((topic, [(r.u16(), r.u64(), r.u32()) for _ in range(r.u8())]))
        except (ValueError, struct.error, UnicodeDecodeError):
            return
        deadline = time.monotonic() + min(max_wait_ms / 1000, MAX_WAIT_CAP_S)
        with self._lock:
            # 0 and UINT64_MAX mean "first available" and "high-water mark + 1" as of the request's arrival
            for topic, partitions in wanted:
                parts = self.topics.get(topic)
                for i, (pid, seq, size) in enumerate(partitions):
                    if parts is not None and pid < len(parts) and seq in (0, U64_MAX):
                        part = parts[pid]
                        partitions[i] = (pid, part.first_available if seq == 0 else part.hw + 1, size)
            while True:
                head, chunks, waiting = self._fetch_once(rid, wanted)
                total = sum(len(c) for c in chunks)
                left = deadline - time.monotonic()
                if not waiting or (total and total >= min_bytes) or left <= 0 or not self._running.is_set():
                    break
                self._lock.wait(left)
        send(CONSUME, struct.pack("<I", len(head)) + head + b"".join(chunks))

    def _fetch_once(self, rid: int, wanted: list) -> tuple[bytes, list[bytes], bool]:
        """``(header, chunks, at least one partition is at its tail)`` under the lock."""
        head = bytearray(struct.pack("<IB", rid, len(wanted)))
        chunks: list[bytes] = []
        tail = False
        for topic, partitions in wanted:
            head += _str8(topic) + bytes([len(partitions)])
            parts = self.topics.get(topic)
            if parts is None:
                head += struct.pack("<H", 0xFFFF)
                continue
            for pid, seq, fetch_size in partitions:
                self.fetch_sizes.append(fetch_size)
                head += struct.pack("<H", pid)
                injected = self._fetch_faults.get((topic, pid))
                if injected:
                    code, leader = injected.pop(0)
                    head.append(code)
                    if code == 0xFC:
                        head += _endpoint(leader or "127.0.0.1:1")
                    continue
                if pid >= len(parts):
                    head.append(0xFF)
                    continue
                part = parts[pid]
                first = part.first_available
                if seq > part.hw + 1 or seq < first:
                    head += bytes([0x01]) + struct.pack("<QQIQ", 0, part.hw, 0, first)
                    continue
                entry, chunk = (None, b"") if seq == part.hw + 1 else part.chunk(seq, fetch_size, self.cut_chunks)
                if entry is None:
                    tail = True
                    head += bytes([0]) + struct.pack("<QQI", seq, part.hw, 0)
                elif entry.sparse:
                    head += bytes([0xFE]) + struct.pack("<QI", part.hw, len(chunk))
                else:
                    head += bytes([0]) + struct.pack("<QQI", entry.first, part.hw, len(chunk))
                chunks.append(chunk)
        return bytes(head), chunks, tail

    def _discover_partitions(self, r: _Reader) -> bytes:
        rid = r.u32()
        topic = r.str8()
        asked = []
        while r.pos < len(r.data):
            asked.append(r.u16())
        out = bytearray(struct.pack("<I", rid) + _str8(topic))
        with self._lock:
            parts = self.topics.get(topic)
            if parts is None:
                return bytes(out + struct.pack("<H", 0))
            ids = asked or list(range(len(parts)))
            out += struct.pack("<H", len(ids))
            for pid in ids:
                injected = self._fetch_faults.get((topic, pid))
                if injected and injected[0][0] in (0xFB, 0xFC, 0xFD):
                    code, leader = injected.pop(0)
                    out += struct.pack("<QQ", U64_MAX, U64_MAX) + bytes([code])
                    if code == 0xFC:
                        out += _endpoint(leader or "127.0.0.1:1")
                    continue
                part = parts[pid] if pid < len(parts) else _Partition()
                out += struct.pack("<QQ", part.reported_first, part.hw)
        return bytes(out)

    def _create_topic(self, r: _Reader) -> bytes:
        rid = r.u32()
        topic = r.str8()
        partitions = r.u16()
        config = r.take(r.varint()).decode()
        head = struct.pack("<I", rid) + _str8(topic)
        valid_name = 0 < len(topic) <= 64 and all(c.isalnum() or c in "_-." for c in topic)
        if partitions == 0 or not valid_name:
            return head + bytes([10])
        for line in config.splitlines():
            if line.strip() and (("=" not in line) or line.split("=", 1)[0].strip() not in CONFIG_KEYS):
                return head + bytes([4])
        with self._lock:
            if topic in self.topics:
                return head + bytes([1])
            self.topics[topic] = [_Partition() for _ in range(partitions)]
        return head + bytes([0])


def main() -> None:
    parser = argparse.ArgumentParser(description="the TANK test double (tests/doubles/tank_broker.py)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--topic", action="append", default=[], help="name:partitions (repeatable)")
    args = parser.parse_args()
    topics = {spec.split(":")[0]: int(spec.split(":")[1]) for spec in args.topic}
    broker = TankBroker(topics, port=args.port).start()
    print(f"listening {broker.address}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        broker.stop()


if __name__ == "__main__":
    main()
