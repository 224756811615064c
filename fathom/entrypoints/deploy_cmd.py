"""`fathom deploy space`: the env server's container image as a Hugging Face Space (Docker SDK)."""

from __future__ import annotations

from pathlib import Path

import typer

from fathom.entrypoints.common import die

app = typer.Typer(help="Deploy the env server.", no_args_is_help=True)


@app.command("space")
def space(
    repo_id: str = typer.Argument(..., help="The Space, owner/name (created if missing)."),
    config: Path = typer.Option(Path("configs/container.toml"), "--config", "-c",
                                help="Env server config the image serves (shipped as configs/container.toml)."),
    out: Path = typer.Option(None, help="Where to write the Space folder (default: runs/space/<name>)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Write the folder and list what would be uploaded; "
                                                          "no Hub call."),
    private: bool = typer.Option(False, help="Create the Space private."),
    token: str = typer.Option(None, envvar="HF_TOKEN", help="Hub token with write access (default: HF_TOKEN, "
                                                            "or the `hf auth login` token)."),
) -> None:
    """Write the Space folder (Dockerfile, package, config, card) and push it with huggingface_hub."""
    from fathom.config import ConfigError
    from fathom.config.security import SHARED_TOKEN_ENV, shared_token
    from fathom.env_server.space import HEALTH_PATH, build_space_folder, push_space

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        die(f"Space id {repo_id!r} is not owner/name, e.g. YOU/fathom-env")
    out = out or Path("runs") / "space" / repo_id.split("/")[1]
    try:
        files = build_space_folder(out, repo_id, config)
    except (ConfigError, OSError) as e:
        die(f"cannot build the Space folder from {config}: {e}")
    total = sum((out / f).stat().st_size for f in files)
    print(f"Space folder {out}: {len(files)} files, {total / 1e6:.1f} MB (sdk docker, health {HEALTH_PATH})")
    if dry_run:
        for f in files:
            if f.parts[0] != "fathom":
                print(f"  {f}")
        print(f"  fathom/ ({sum(f.parts[0] == 'fathom' for f in files)} files)")
        secret = "set" if shared_token() else f"missing: export {SHARED_TOKEN_ENV} before the real push"
        print(f"dry run: would create Space {repo_id} (docker), store its {SHARED_TOKEN_ENV} secret ({secret}) "
              "and upload the folder above")
        return
    secret = shared_token()
    if not secret:
        die(f"the Space's env server binds to all interfaces and refuses to start without a shared token: "
            f"export {SHARED_TOKEN_ENV}=<a long random string>; it is stored as the Space's secret, and clients "
            "send it as the X-Fathom-Token header")
    try:
        url = push_space(out, repo_id, private=private, token=token, shared_token=secret)
    except Exception as e:  # noqa: BLE001 - auth, network, name taken: the Hub's message says which
        die(f"push to Space {repo_id} failed: {e}")
    print(f"pushed: {url} (the Space builds the image, then answers {HEALTH_PATH})")
