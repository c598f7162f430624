#!/usr/bin/env bash
# Type-checks the sandbox image's Python (the REPL server and its tests) with mypy --strict.
# Installs Debian's mypy when it is missing (as root on Debian). The host may have an older
# Python than the image (Debian 12 has 3.11, the image 3.13), so the code is checked as
# Python 3.11, which keeps it valid for both.
#
# usage: images/lint.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

"$here/../deploy/ensure-package.sh" mypy

# The cache stays out of images/python (build.sh hashes every file there) and out of $TMPDIR
# (a test run leaves nothing there): it goes to bin/, which git ignores. The polyglot image's
# tests import the REPL's test client from images/python/tests.
cd "$here/python"
MYPYPATH=tests exec mypy --strict --python-version 3.11 --config-file "$here/mypy.ini" \
  --cache-dir "$here/../bin/mypy-cache" \
  repl_server.py kiln_tool.py kiln_repl tests ../polyglot/tests
