import sys

from pmda_mmv.cli import main

sys.exit(main())
