"""Test doubles of brokers this project cannot run in its tests (each module's docstring says why)."""
