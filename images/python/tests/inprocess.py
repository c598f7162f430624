"""Puts the REPL server's home first on sys.path, so that in-process tests import the server's
package as it is installed (/opt/kiln in the image), not from wherever the tests are."""

import os
import sys

from repl_client import SERVER

SERVER_HOME = os.path.dirname(os.path.abspath(SERVER))
PACKAGE_DIR = os.path.join(SERVER_HOME, "kiln_repl")

if sys.path[:1] != [SERVER_HOME]:
    sys.path.insert(0, SERVER_HOME)
