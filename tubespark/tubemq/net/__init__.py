"""Connection layer: TCP sockets, timeouts, serial numbers, master fail-over. No TubeMQ semantics."""
