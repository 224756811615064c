"""The Gradio page: a document, a question and a served model in; the episode's tree streamed out as it grows.

The backend (`fathom.ui.backend.Backend`) is injected, so this module never reaches the env
server or the proxy itself: it turns the page's inputs into one `submit` and streams `LiveEpisode` updates.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any, Iterator, Protocol

from fathom.ui.errors import error_text
from fathom.ui.live import EXAMPLE_TASKS, LiveEpisode, gold_task
from fathom.ui.tree import CSS, Outcome, render_result, render_tree

INTRO = """# FATHOM: ask a document of any size
The document becomes the REPL's `context`; the model only sees what its code prints. Watch each turn's code,
its output and the `llm()` sub-calls it makes, nested by depth. Give an expected answer (or load an example
task) to see the reward."""


class EpisodeBackend(Protocol):
    def models(self) -> list[tuple[str, str]]: ...

    def submit(self, model: str, question: str, document: str, task: Any | None,
               live: LiveEpisode) -> tuple[concurrent.futures.Future[Outcome], str]: ...


def read_document(text: str | None, upload: str | None) -> str:
    """An uploaded file wins over pasted text; bytes that are not UTF-8 become U+FFFD rather than an error."""
    if upload:
        return Path(upload).read_bytes().decode("utf-8", errors="replace")
    return text or ""


def build_app(backend: EpisodeBackend, *, default_model: str | None = None, endpoint: str = "",
              examples: list[str] | None = None) -> Any:
    """`examples`: the picker's task ids (default: the built-in ones; `live.example_tasks` adds imported rows).

    Long because it is the page's layout: gradio builds components and their event handlers inside one `Blocks`
    context, and the page reads top to bottom as it appears."""
    import gradio as gr

    examples = list(examples or EXAMPLE_TASKS)

    def refresh_models() -> Any:
        try:
            choices = backend.models()
        except Exception as e:  # noqa: BLE001 - the page says what is wrong with the endpoint instead of breaking
            gr.Warning(error_text(e))
            return gr.Dropdown(choices=[], value=None)
        names = [n for _, n in choices]
        value = default_model if default_model in names else (names[-1] if names else None)
        return gr.Dropdown(choices=choices, value=value)

    def load_example(task_id: str) -> tuple[str, str, str, str, None]:
        from fathom import tasks

        t = tasks.get_task(task_id)
        return t.context, t.question, t.gold.answer, t.id, None

    def run(model: str | None, text: str, upload: str | None, question: str, expected: str,
            example: str) -> Iterator[tuple[str, str, str]]:
        if not model:
            raise gr.Error("Pick a model: the endpoint lists none yet (press ↻ to ask it again).")
        if not question.strip():
            raise gr.Error("Ask a question about the document.")
        document = read_document(text, upload)
        if not document:
            raise gr.Error("Paste a document or upload a text file: it becomes the REPL's `context`.")
        task = None
        if example:
            from fathom import tasks

            t = tasks.get_task(example)
            task = t if (t.question, t.context) == (question, document) else None
        if task is None and expected.strip():
            task = gold_task(question, document, expected)
        live = LiveEpisode()
        # Shown at once: starting the base's runtime (sandbox, tokenizer) can take a while on a busy machine.
        yield f"Starting an episode on **{model}**…", render_tree([]), ""
        try:
            fut, note = backend.submit(model, question, document, task, live)
        except Exception as e:  # noqa: BLE001 - unreachable endpoint, unknown model, runtime that cannot start
            # A toast beside the status, not gr.Error: an error raised right after a yield can overtake it, and the
            # page would then never show the Failed status.
            gr.Warning(error_text(e))
            yield f"**Failed** on **{model}**: {error_text(e)}", render_tree([]), ""
            return
        status = f"Running on **{model}** ({note}); {len(document):,} characters of context."
        try:
            yield status, render_tree(live.turns, running=True), ""
            for html in live.updates(fut.done):
                yield status, html, ""
            out = fut.result()
        except Exception as e:  # noqa: BLE001 - a bug past the episode's own error handling: show it, keep the page
            msg = f"the episode failed: {error_text(e)}"
            gr.Warning(msg)
            yield f"**Failed** on **{model}**: {msg}", render_tree(live.turns), ""
            return
        finally:
            fut.cancel()  # the visitor left mid-episode (Gradio closed this generator): stop the episode too
        done = f"Done on **{model}** ({note}): {out.stop_reason}."
        yield done, render_tree(live.turns), render_result(out, live.turns)

    with gr.Blocks(title="FATHOM") as demo:
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=2):
                with gr.Row():
                    model = gr.Dropdown(label=f"Model served at {endpoint}" if endpoint else "Model", choices=[],
                                        elem_id="model", scale=5)
                    refresh = gr.Button("↻", elem_id="refresh", scale=1, min_width=40)
                text = gr.Textbox(label="Document (paste)", lines=8, max_lines=16, elem_id="document")
                upload = gr.File(label="…or upload a text file", type="filepath", elem_id="upload")
                question = gr.Textbox(label="Question", lines=2, elem_id="question")
                expected = gr.Textbox(label="Expected answer (optional: scores the episode)", elem_id="expected")
                with gr.Row():
                    example_id = gr.Dropdown(label="Example task", choices=examples,
                                             value=examples[0], elem_id="example-id", scale=3)
                    load = gr.Button("Load example", elem_id="load-example", scale=1)
                example = gr.State("")
                go = gr.Button("Run episode", variant="primary", elem_id="run")
            with gr.Column(scale=3):
                status = gr.Markdown("", elem_id="status")
                tree = gr.HTML(render_tree([]), elem_id="tree")
                result = gr.HTML("", elem_id="result")
        demo.load(refresh_models, outputs=model)
        refresh.click(refresh_models, outputs=model)
        load.click(load_example, inputs=example_id, outputs=[text, question, expected, example, upload])
        go.click(run, inputs=[model, text, upload, question, expected, example], outputs=[status, tree, result])
    return demo


def launch(demo: Any, *, host: str, port: int, block: bool = True) -> Any:
    """Serve the page (the CSS and theme go to launch() since Gradio 6)."""
    return demo.queue(default_concurrency_limit=4).launch(server_name=host, server_port=port, css=CSS,
                                                          prevent_thread_lock=not block, show_error=True)
