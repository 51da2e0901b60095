"""Foundations every broker shares: framed TCP connections, retry, options, offset planning.

Nothing here knows a broker's wire format or imports Spark; broker packages build on it.
"""
