"""kiln's in-container REPL server: `python3 /opt/kiln/repl_server.py [--no-preload] [--once]
[--await-hello] [--data-dir DIR]`.

The server is the kiln_repl package beside this file; its __init__ says what each module
holds. The wire format is described in docs/protocol.md of the kiln repository.
"""

import os
import sys

# Every module of the server is imported here, before user code runs: from then on the data
# directory, which user code can write, is first on sys.path.
from kiln_repl.server import main

if __name__ == "__main__":
    # os._exit: user threads and atexit hooks must not keep the sandbox alive.
    os._exit(main(sys.argv[1:]))
