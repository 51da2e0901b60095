"""Wire codec: RocketMQ remoting frames, request headers, stored messages, routes and pop receipts.

Bytes only: no sockets, no threads, no clocks (callers pass times in). Facts: ``docs/rocketmq/protocol.md``.
"""
