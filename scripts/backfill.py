"""spark-submit entry point: ``spark-submit [spark options] scripts/backfill.py export|publish ...``."""

import sys

from tubespark.backfill import main

sys.exit(main())
