"""Runs code the way Open WebUI's Jupyter code interpreter engine does, for the tests: a kernel
per run started with a bodiless POST and the token in the query, one execute_request over the
kernel's WebSocket (the token in its query too, a header with an empty date), the replies to
that request gathered until the kernel reports idle, and the kernel deleted. Open WebUI itself
cannot be installed here; this is its request sequence, written from its documented behaviour.

usage: /usr/bin/python3 openwebui_flow.py BASE_URL TOKEN < code

Prints {"stdout", "stderr", "result", "kernel", "kernels_after"} as JSON: result holds each display's
PNG as a data: URL or its text/plain, as Open WebUI shows them.
"""

import json
import sys
import urllib.parse
import urllib.request
import uuid

import websocket


def call(method: str, url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as resp:
        return resp.read()


def main() -> None:
    base, token = sys.argv[1].rstrip("/") + "/", sys.argv[2]
    code = sys.stdin.read()
    query = "?" + urllib.parse.urlencode({"token": token})
    kernel = json.loads(call("POST", base + "api/kernels" + query))["id"]
    out = {"stdout": "", "stderr": "", "result": [], "kernel": kernel}
    try:
        ws = websocket.create_connection(base.replace("http", "ws", 1) + f"api/kernels/{kernel}/channels" + query, timeout=60)
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "user",
                       "session": uuid.uuid4().hex, "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True},
        }))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            content = msg["content"]
            kind = msg.get("msg_type")
            if kind == "stream":
                out[content["name"]] += content["text"]
            elif kind in ("execute_result", "display_data"):
                data = content["data"]
                if "image/png" in data:
                    out["result"].append("data:image/png;base64," + data["image/png"])
                elif "text/plain" in data:
                    out["result"].append(data["text/plain"])
            elif kind == "error":
                out["stderr"] += "\n".join(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
        ws.close()
    finally:
        call("DELETE", base + f"api/kernels/{kernel}" + query)
    out["kernels_after"] = [k["id"] for k in json.loads(call("GET", base + "api/kernels" + query))]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
