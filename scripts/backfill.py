"""spark-submit entry point: ``spark-submit [spark options] scripts/backfill.py export|publish ...``."""

import sys

from tubespark.apps.backfill import main

sys.exit(main())
