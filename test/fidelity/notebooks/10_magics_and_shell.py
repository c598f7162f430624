# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Log digest: a notebook in IPython's language
# The magics and shell escapes notebooks are written with: an inline backend, a helper module
# written from a cell and run, shell commands whose output is bound to names, the environment,
# the working directory, the namespace listed, help, and the history of results. Nothing here
# prints a time, so every run reads the same.

# %% Setup, as notebooks begin
%matplotlib inline
%config InlineBackend.figure_format = 'png'
%load_ext autoreload
%autoreload 2
import pandas as pd
pd.set_option("display.width", 100)
print("ready")

# %% A helper module, written from the notebook
%%writefile logtools.py
import re

LINE = re.compile(r"(?P<level>INFO|WARN|ERROR) (?P<code>\d{3}) (?P<path>\S+)")


def parse(lines):
    rows = []
    for line in lines:
        match = LINE.search(line)
        if match:
            rows.append(match.groupdict())
    return rows

# %% Some logs, written with the shell
!mkdir -p logs
!printf 'INFO 200 /home\nWARN 404 /missing\nINFO 200 /about\nERROR 500 /api/save\nINFO 304 /home\n' > logs/a.log
!printf 'ERROR 502 /api/load\nINFO 200 /home\nWARN 429 /api/save\n' > logs/b.log
files = !ls logs
files

# %% Read them back through the shell, into Python
lines = !cat logs/*.log
print(len(lines), "lines;", "exit code", _exit_code)
from logtools import parse
rows = parse(lines)
frame = pd.DataFrame(rows)
frame.groupby("level").size()

# %% The environment and the working directory
%env DIGEST_MODE=strict
import os
%cd logs
here = %pwd
%cd ..
os.environ["DIGEST_MODE"], os.path.basename(here)

# %% What the namespace holds
%who DataFrame
%who_ls list

# %% Help on what this notebook defined
parse?

# %% The history of results
frame.shape

# %% _N refers to an earlier result by its number
latest = _
latest[0] * 10

# %% A shell command that fails keeps its exit status
!test -f logs/none.log
print("missing file:", _exit_code)

# %% A magic that does not exist
%no_such_magic

# %% The names bound before it are all here
sorted(frame.code.unique()), len(files)
