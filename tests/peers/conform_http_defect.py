"""The echo example's generated HTTP client with one transport defect planted, for the
conformance kit's tests: `conform_http_defect.py PACKAGE ARGS...` runs PACKAGE's client
with every HTTP request it sends altered as FAKE_CLIENT_DEFECT says:

  stream-accept-json   the stream GETs accept `application/json`, not `text/event-stream`
  no-connection-id     no `Acp-Connection-Id` on any request after `initialize`
"""

from __future__ import annotations

import os
import runpy
import sys
from typing import Any

import httpx

DEFECT = os.environ.get("FAKE_CLIENT_DEFECT", "")
_send = httpx.AsyncClient.send


async def send(self: httpx.AsyncClient, request: httpx.Request, **kw: Any) -> httpx.Response:
    if DEFECT == "stream-accept-json" and request.method == "GET":
        request.headers["Accept"] = "application/json"
    elif DEFECT == "no-connection-id":
        request.headers.pop("Acp-Connection-Id", None)
    return await _send(self, request, **kw)


httpx.AsyncClient.send = send  # type: ignore[method-assign]

if __name__ == "__main__":
    package = sys.argv[1]
    sys.argv = [package, *sys.argv[2:]]
    runpy.run_module(package, run_name="__main__", alter_sys=True)
