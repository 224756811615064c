"""A server inside this process: an ASGI app on a free loopback port, for the in-process proxies and fakes of
`fathom sft`, `fathom ask` and `fathom ui`."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free loopback port; yields its base URL and stops it on exit."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("an in-process server failed to start (see the log above)")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def capture_in_process(cfg: Any, base_url: str, base: str, tokenizer: str | None) -> Iterator[tuple[Any, str, str]]:
    """What `fathom ask` and `fathom ui` run episodes through: a capture proxy of their own, in this process, in
    front of `base` served at `base_url` (sessions pin the model they name; weights are merged, never hot-swapped).

    Yields (a copy of `cfg` whose env server talks to that proxy on the token path where the server allows it,
    the proxy's URL, a note saying which path and why). The proxy stops on exit."""
    import copy

    from fathom.capture_proxy.app import create_app
    from fathom.policy_server.served import token_path

    cfg = copy.deepcopy(cfg)
    tokenizer_dir, note = token_path(base_url, base, tokenizer)
    cfg.env_server.prompt_format = "tokens" if tokenizer_dir else "chat"
    cfg.env_server.tokenizer = tokenizer_dir or ""
    app = create_app(cfg.capture_proxy, upstream_url=base_url.rstrip("/"), base_model=base, weight_sync="merged")
    with serve_in_thread(app) as proxy_url:
        cfg.env_server.proxy_url = proxy_url  # the token path checks its template against this engine at start
        yield cfg, proxy_url, note
