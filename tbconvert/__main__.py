import sys

from tbconvert.cli import main

sys.exit(main())
