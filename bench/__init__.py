"""tubespark's benchmark: throughput, latency and memory against the official Java client, an
in-memory ceiling and Spark's Kafka connector, in one alternating session (``python -m bench``).

See ``bench/run.py`` for the command line and ``bench/cases.py`` for what each case measures.
"""
