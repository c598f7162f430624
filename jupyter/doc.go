// Package jupyter serves the Jupyter Server kernels API and the kernel messaging
// protocol (version 5.3, JSON over WebSocket) on kiln's sessions, so that Jupyter
// clients (JupyterLab and Notebook in gateway mode, Open WebUI's code interpreter,
// AutoGen's and LangChain's executors, @jupyterlab/services, nbclient) run their code
// in kiln's sandboxes.
//
// A kernel is a kiln session of its caller's: each cell is a call of that session, in
// its live sandbox, its state stored after each one as any session's, resumed after an
// eviction or on another replica. The registry of kernels (their execution counts and
// connections) is this process's; a kernel asked for by id on another replica is found
// through its session.
//
// The only importer of the WebSocket library (coder/websocket).
package jupyter
