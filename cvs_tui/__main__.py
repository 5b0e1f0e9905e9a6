import sys

from cvs_tui.cli.main import main

sys.exit(main())
