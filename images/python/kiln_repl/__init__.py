"""kiln's in-container REPL server, as a package of small modules.

repl_server.py, one level up, is the entry point; server.py holds the request loop and imports
every other module here at start. That matters: user code runs with the data directory first
on sys.path, so a module the server first imported later could be looked up there. Modules of
this package are found through the package's own __path__ (/opt/kiln/kiln_repl), never through
sys.path, and all of them (but mplbackend, below) are loaded before the first run; a test
checks both.

- log: the REPL's own diagnostics channel.
- protocol: requests, limits and the messages sent back (docs/protocol.md).
- framing: frames on the wire, their binary payloads read in and written out.
- channel: the protocol channel, read on a thread of its own and written under a lock.
- interrupts: interrupting the running code, and only it.
- capture: the pipes behind fds 1 and 2, and decoding what they caught.
- events: output and figures sent while a run goes on, by a sender thread.
- files: input files written in, changed files collected out.
- tools: calls to the host's client's tools while a run goes on, in Python and in bash.
- egress: the way out, a proxy port on loopback whose connections travel to kiln.
- relay: the process that carries those connections over the sandbox's Unix socket, where
  the runtime gives one.
- packages: what pip installed in a session, kept with its state.
- rich: what code displays, and a cell's last value, as MIME bundles.
- figures: matplotlib figures saved as files, the part that needs no matplotlib.
- mplbackend: the matplotlib backend; the one module loaded later, by matplotlib, as a
  submodule of this package (so through its __path__ too).
- state: the state blob, and what of the namespace belongs in it.
- settings: what a notebook keeps from one cell to the next outside its names (matplotlib's
  style, pandas' options, the global random generators...).
- heap: the warm heap, memory the warm-up touches so that a request's buffers find pages.
- shell: IPython's language in a session: magics, shell escapes, help, history.
- introspect: completions, help and is-complete answers between cells, by IPython's
  completer and inspector.
- running: compiling and running a cell, the soft deadline, outcomes and tracebacks.
- languages: every language but Python, run as programs: bash, and the image's table
  (languages.json) of compiled and interpreted languages.
- processes: finding and killing what a run left running.
- preload: the pre-imported modules and matplotlib's font cache.
- server: the Server object and main().
"""
