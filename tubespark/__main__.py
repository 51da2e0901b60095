"""``python -m tubespark`` is the ``tubespark`` command."""

import sys

from tubespark.cli import main

sys.exit(main())
