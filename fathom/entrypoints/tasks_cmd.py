"""`fathom tasks build|show|stats|verify`: pinned split manifests and task inspection."""

from __future__ import annotations

import json
import logging

import typer

from fathom.entrypoints.common import die, eprint

app = typer.Typer(help="Build, inspect and count long-context tasks.", no_args_is_help=True)

SPLIT_OPTION = typer.Option(..., "--split", "-s", help="train, test or heldout.")
DIR_OPTION = typer.Option("", "--dir", help="Manifest directory; default: the pinned ones in fathom/tasks/splits.")


@app.command("build")
def build(split: str = SPLIT_OPTION,
          n: int = typer.Option(0, "--n", help="Number of tasks (default: train 1200, test 180, heldout 240)."),
          out: str = DIR_OPTION, verify: bool = typer.Option(False, help="Regenerate and check digests afterwards.")):
    """Generate a split and write its manifest (ids, parameters, SHA-256; not the contexts)."""
    from fathom.tasks import splits

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        manifest = splits.build(split, n or None,
                                progress=lambda i, total, tid: i % 100 == 0 and eprint(f"  {i}/{total} {tid}"))
    except (splits.ManifestError, ValueError) as e:
        die(str(e))
    path = splits.write(manifest, out or None)
    if verify:
        splits.verify(splits.read(split, out or None))
    print(json.dumps({"wrote": str(path), "n": manifest["n"], "haystack": manifest["haystack"]}, indent=2))


@app.command("show")
def show(task_id: str = typer.Argument(..., help="Task id, e.g. needle-64k-s1000123."),
         chars: int = typer.Option(400, "--chars", help="Characters of context to print (-1: all)."),
         gold: bool = typer.Option(True, "--gold/--no-gold", help="Include the gold answer and metadata.")):
    """Print a task: question, gold, metadata and the start of its context."""
    from fathom.tasks import get_task

    try:
        task = get_task(task_id)
    except KeyError as e:
        die(str(e.args[0]))
    d = task.to_dict(context=False) if gold else {"id": task.id, "family": task.family, "question": task.question}
    d["context"] = task.context if chars < 0 else task.context[:chars]
    print(json.dumps(d, indent=2))


@app.command("stats")
def stats(split: str = typer.Option("all", "--split", "-s", help="train, test, heldout or all."), directory: str = DIR_OPTION):
    """Counts by family and length for pinned splits."""
    from fathom.tasks import splits

    names = list(splits.SPLITS) if split == "all" else [split]
    out = {}
    try:
        for name in names:
            out[name] = splits.stats(splits.read(name, directory or None)["tasks"])
    except splits.ManifestError as e:
        die(str(e))
    print(json.dumps(out, indent=2))


@app.command("verify")
def verify(split: str = SPLIT_OPTION, directory: str = DIR_OPTION):
    """Regenerate every task of a split and check it against the manifest's SHA-256."""
    from fathom.tasks import splits

    try:
        result = splits.verify(splits.read(split, directory or None))
    except splits.ManifestError as e:
        die(str(e))
    print(json.dumps({"split": split, **result}))
