"""``format("tank")`` with nothing to call: PySpark 4's data source discovery registers this module's
``DefaultSource`` (tubespark's TANK data source) under its name, ``tank``.

Imports nothing heavy and never raises, even without tubespark (a failure here would fail the lookup of every
Python data source of the session): the class is made on first access. Why and how: :mod:`tubespark.apps.registry`.
"""

try:
    from tubespark.apps.registry import discovery_hook

    __getattr__ = discovery_hook("tank")
except Exception:  # noqa: BLE001  # no tubespark here: no DefaultSource, so the lookup skips this module
    pass
