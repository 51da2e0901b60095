"""Wire codec: TubeMQ bytes <-> messages. No sockets, no clocks, no logging."""
