import sys

from agentproto.cli import main

sys.exit(main())
