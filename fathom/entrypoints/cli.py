"""The `fathom` command. Sub-apps live one per component in this package.

Only typer and the config package are imported at module level, so `fathom --help`
answers without importing torch, vLLM or transformers.
"""

from __future__ import annotations

import typer

from fathom.entrypoints import (
    ask_cmd,
    config_cmd,
    demo_cmd,
    deploy_cmd,
    doctor_cmd,
    env_cmd,
    eval_cmd,
    eval_watch_cmd,
    export_cmd,
    launch_cmd,
    model_cmd,
    policy_cmd,
    proxy_cmd,
    sft_cmd,
    stages_cmd,
    tasks_cmd,
    train_cmd,
    ui_cmd,
)
from fathom.entrypoints.common import OVERRIDE_SETTINGS

app = typer.Typer(
    name="fathom",
    help="FATHOM: train small models to work over documents far larger than their context window.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(model_cmd.app, name="model")
app.add_typer(policy_cmd.app, name="policy")
app.add_typer(proxy_cmd.app, name="proxy")
app.add_typer(env_cmd.app, name="env")
app.add_typer(tasks_cmd.app, name="tasks")
app.add_typer(config_cmd.app, name="config")
app.add_typer(deploy_cmd.app, name="deploy")
eval_cmd.app.command("watch", context_settings=OVERRIDE_SETTINGS)(eval_watch_cmd.watch)
eval_cmd.app.command("stages", context_settings=OVERRIDE_SETTINGS)(stages_cmd.stages)
app.add_typer(eval_cmd.app, name="eval")
app.command("doctor", context_settings=OVERRIDE_SETTINGS)(doctor_cmd.doctor)
app.command("demo", context_settings=OVERRIDE_SETTINGS)(demo_cmd.demo)
app.command("export")(export_cmd.export)
app.command("serve", context_settings=OVERRIDE_SETTINGS)(policy_cmd.serve_adapter)
app.command("ask", context_settings=OVERRIDE_SETTINGS)(ask_cmd.ask)
train_cmd.register(app)
ui_cmd.register(app)
app.command("launch", context_settings=OVERRIDE_SETTINGS)(launch_cmd.launch)
app.command("sft", context_settings=OVERRIDE_SETTINGS)(sft_cmd.sft)


if __name__ == "__main__":
    app()
