import sys

from hangwatch.cli.main import main

sys.exit(main())
