import sys

from tbconvert.cli import console_main

sys.exit(console_main())
