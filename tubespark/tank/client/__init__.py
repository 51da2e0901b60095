"""TANK client: broker calls, exact ``[start, end)`` range reads, and the pipelined bundle producer."""
