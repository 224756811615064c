"""`fathom tasks build|show|stats|verify|import|presets`: pinned split manifests, imported sets, task inspection."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from fathom.entrypoints.common import die, eprint

app = typer.Typer(help="Build, inspect and count long-context tasks.", no_args_is_help=True)

SPLIT_OPTION = typer.Option(..., "--split", "-s", help="train, test, heldout or an imported split's name.")
TASKS_CONFIG = typer.Option("configs/smoke.toml", "--config", "-c",
                            help="Config whose [tasks] gives sources and store_dir (skipped when the default is absent).")


def _tasks_config(config: str):
    """The config's [tasks] section applied (store directory, haystack); None when the default file is absent."""
    from fathom.config import ConfigError, load_config
    from fathom.tasks import configure

    if not Path(config).is_file() and config == TASKS_CONFIG.default:
        return None
    try:
        cfg = load_config(config, [])
    except ConfigError as e:
        die(str(e))
    configure(cfg.tasks)
    return cfg.tasks
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
         gold: bool = typer.Option(True, "--gold/--no-gold", help="Include the gold answer and metadata."),
         config: str = TASKS_CONFIG):
    """Print a task (generated, or imported: NAME-ROW): question, gold, metadata and the start of its context."""
    from fathom.tasks import get_task

    _tasks_config(config)
    try:
        task = get_task(task_id)
    except KeyError as e:
        die(str(e.args[0]))
    except ValueError as e:  # an imported task whose stored context changed on disk
        die(str(e))
    d = task.to_dict(context=False) if gold else {"id": task.id, "family": task.family, "question": task.question}
    d["context"] = task.context if chars < 0 else task.context[:chars]
    print(json.dumps(d, indent=2))


@app.command("stats")
def stats(split: str = typer.Option("all", "--split", "-s", help="train, test, heldout, an imported split or all."),
          directory: str = DIR_OPTION, config: str = TASKS_CONFIG):
    """Counts by family and length for pinned splits (all: the built-in ones and every imported one)."""
    from fathom.tasks import splits, store

    _tasks_config(config)
    names = list(splits.SPLITS) + store.names() if split == "all" else [split]
    out = {}
    try:
        for name in names:
            rows = splits.read(name, directory or None)["tasks"] if name in splits.SPLITS else store.manifest(name)["tasks"]
            out[name] = splits.stats(rows)
    except splits.ManifestError as e:
        die(str(e))
    print(json.dumps(out, indent=2))


@app.command("verify")
def verify(split: str = SPLIT_OPTION, directory: str = DIR_OPTION, config: str = TASKS_CONFIG):
    """Regenerate (built-in) or re-read (imported) every task of a split and check it against the manifest's SHA-256."""
    from fathom.tasks import splits, store

    _tasks_config(config)
    try:
        result = splits.verify(splits.read(split, directory or None)) if split in splits.SPLITS else store.verify(split)
    except splits.ManifestError as e:
        die(str(e))
    print(json.dumps({"split": split, **result}))


@app.command("import")
def import_(
    source: str = typer.Argument(..., help="A [[tasks.sources]] name, a .jsonl/.parquet/.csv file, a local dataset "
                                           "directory laid out like a Hub repo, or hub:owner/name."),
    name: str = typer.Option(None, "--name", "-n", help="Imported split name (task ids NAME-0, NAME-1, ...)."),
    config: str = TASKS_CONFIG,
    preset: str = typer.Option(None, help="Field names of a known set (see `fathom tasks presets`)."),
    field: list[str] = typer.Option(None, "--field", help="OURS=THEIRS column mapping, e.g. question=input; repeatable."),
    limit: int = typer.Option(None, help="Import only the first N rows."),
    answer_type: str = typer.Option(None, help="string, number or set, for rows without their own type column."),
    list_answers: str = typer.Option(None, help="A list answer is a `set` (F1) or `aliases` (accepted spellings)."),
    hub_config: str = typer.Option(None, help="Hub dataset config (subset)."),
    hub_split: str = typer.Option(None, help="Hub dataset split (default test)."),
    revision: str = typer.Option(None, help="Hub commit, tag or branch; the resolved commit is recorded."),
    force: bool = typer.Option(False, "--force", help="Replace a pinned split whose tasks the source changes."),
    progress: bool = typer.Option(True, help="Show a progress bar."),
):
    """Read, validate and pin a task source into the store ($FATHOM_HOME/tasks or tasks.store_dir)."""
    from fathom.tasks import store
    from fathom.tasks.sources import SourceError, source_from_spec
    from fathom.tasks.splits import ManifestError

    tcfg = _tasks_config(config)
    fields = {}
    for f in field or []:
        ours, sep, theirs = f.partition("=")
        if not sep or not ours or not theirs:
            die(f"--field {f!r}: give OURS=THEIRS, e.g. --field question=input")
        fields[ours] = theirs
    try:
        src = source_from_spec(source, tcfg.sources if tcfg else [], name=name, preset=preset, fields=fields,
                               limit=limit, answer_type=answer_type, list_answers=list_answers, config=hub_config,
                               split=hub_split, revision=revision)
        with _bar(progress) as tick:
            summary = store.import_source(src, name, force=force, progress=tick)
    except (SourceError, ManifestError, ValueError) as e:
        die(str(e))
    print(json.dumps(summary, indent=2))


def _bar(enabled: bool):
    """A rich progress bar over bytes (when the source's size is known) or rows; a no-op when disabled."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    @contextlib.contextmanager
    def bar():
        with Progress(TextColumn("importing {task.fields[rows]} rows"), BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), TimeRemainingColumn(), console=Console(stderr=True)) as p:
            job = p.add_task("import", total=None, rows=0)

            def tick(rows: int, seen: int, total: int | None) -> None:
                p.update(job, completed=seen, total=total, rows=rows)  # rich redraws at its own rate

            yield tick

    return bar()


@app.command("presets")
def presets():
    """Field names of the public long-context sets FATHOM knows (use with --preset or tasks.sources preset)."""
    from fathom.tasks.sources import PRESETS

    print(json.dumps(PRESETS, indent=2))
