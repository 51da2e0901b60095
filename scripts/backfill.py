"""spark-submit entry point: ``spark-submit [spark options] scripts/backfill.py export|publish ...``."""

import sys

from tubespark.tubemq.backfill import main

sys.exit(main())
