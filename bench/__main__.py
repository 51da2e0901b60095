"""``python -m bench``: the one command (see :mod:`bench.run`)."""

from bench.run import main

raise SystemExit(main())
