"""TANK's binding of core's framed TCP connection: the first-Ping handshake, request ids, Pings skipped."""
