"""TANK (phaistos-networks/TANK v4): the ``tank`` data source, in the four layers of ARCHITECTURE.md.

``wire`` (bytes <-> frames, requests, bundles), ``net`` (TANK's binding of core's framed connection),
``client`` (broker calls, exact range reads, the bundle producer), ``spark`` (options, readers, writers).
Protocol facts: ``docs/tank/protocol.md``.
"""
