"""Executes a notebook with nbclient through a Jupyter server acting as a gateway: nbclient
starts its kernel with jupyter_server's GatewayKernelManager, which speaks the kernels REST
API and the channels WebSocket, as papermill does against a gateway.

usage: /usr/bin/python3 nbclient_gateway.py SERVER_URL IN.ipynb OUT.ipynb

Errors in cells are recorded as outputs (allow_errors), so the caller sees each cell's result.
"""

import sys

import nbformat
from jupyter_server.gateway.managers import GatewayClient, GatewayKernelManager
from nbclient import NotebookClient


def main() -> None:
    url, source, target = sys.argv[1:4]
    gateway = GatewayClient.instance()
    gateway.url = url
    gateway.ws_url = url.replace("http", "ws", 1)
    nb = nbformat.read(source, as_version=4)
    NotebookClient(nb, kernel_manager_class=GatewayKernelManager, timeout=120, allow_errors=True).execute()
    nbformat.write(nb, target)


if __name__ == "__main__":
    main()
