"""`fathom proxy serve`: run the capture proxy in front of the policy server."""

from __future__ import annotations

import typer

from fathom.entrypoints.common import CONFIG_OPTION, OVERRIDE_SETTINGS, config_from, die

app = typer.Typer(help="Run the capture proxy.", no_args_is_help=True)


@app.command("serve", context_settings=OVERRIDE_SETTINGS)
def serve(ctx: typer.Context, config: str = CONFIG_OPTION) -> None:
    """Serve the capture proxy (default port 8100) in front of the vLLM policy server."""
    cfg = config_from(ctx, config)
    import logging

    import uvicorn

    from fathom.capture_proxy import create_app
    from fathom.config import ConfigError
    from fathom.config.security import check_bind

    token = cfg.token()
    try:
        check_bind(cfg.capture_proxy.host, token, "the capture proxy", "capture_proxy.host")
    except ConfigError as e:
        die(str(e))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    pc, ps = cfg.capture_proxy, cfg.policy_server
    upstream = cfg.policy_url
    app_ = create_app(pc, upstream_url=upstream, base_model=ps.served_model_name, weight_sync=ps.weight_sync,
                      shared_token=token)
    print(f"capture proxy on http://{pc.host}:{pc.port} -> {upstream} (policy = {ps.served_model_name}, "
          f"{ps.weight_sync} sync, shared token {'required' if token else 'off'})", flush=True)
    # Access logs cost ~10% of the proxy's per-call overhead; metrics cover the same ground.
    uvicorn.run(app_, host=pc.host, port=pc.port, log_level="warning", access_log=False, proxy_headers=False)
