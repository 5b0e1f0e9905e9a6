import sys

from cvs_tui.tui.cli import main

sys.exit(main())
