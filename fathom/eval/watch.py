"""`fathom eval watch`: score each new checkpoint as it appears, beside a running trainer.

State lives in the output directory, not in memory: `checkpoint-N.json` is written only when N is
fully scored, and N counts as done only when that file parses whole, so a restarted watcher skips exactly
the checkpoints already done. Files are written in place, never renamed: the output directory may be a
FUSE-mounted bucket (beside a trainer on another machine), where a rename is not known to be atomic, and a
file cut off mid-write is JSON that does not parse, so its checkpoint is scored again.
The base model is scored once into `base.json` and reused. Each adapter is unloaded after its
eval, and leftovers of a crashed watcher are unloaded at start, so vLLM's LoRA slots never fill.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Callable

from fathom.eval import charts
from fathom.eval.checkpoints import CheckpointSource
from fathom.eval.stats import paired

log = logging.getLogger(__name__)

# evaluate(model name or None for the base, label) -> results dict of one model (see evaluate.build_results)
Evaluate = Callable[[str | None, str], dict[str, Any]]


def _whole(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, or None when it is absent or cut off (a watcher stopped while writing it)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class Watcher:
    def __init__(self, source: CheckpointSource, out_dir: str | Path, *, evaluate: Evaluate,
                 load: Callable[[str, str], None], unload: Callable[[str], None], loaded: Callable[[], list[str]],
                 adapter_prefix: str = "fathom-eval-", poll_s: float = 10.0, max_failures: int = 3,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        self.source, self.out = source, Path(out_dir)
        self.evaluate, self.load, self.unload, self.loaded = evaluate, load, unload, loaded
        self.prefix, self.poll_s, self.sleep, self.clock = adapter_prefix, poll_s, sleep, clock
        self.max_failures = max_failures
        self.failures: dict[int, int] = {}
        self.events: list[dict[str, Any]] = []
        """What happened when: {event, step, t} (seen, started, done), for the benchmark and the log."""

    # --- state on disk ------------------------------------------------------------------

    def done_steps(self) -> set[int]:
        done = set()
        for p in self.out.glob("checkpoint-*.json"):
            step = p.stem.split("-")[1]
            if step.isdigit() and _whole(p) is not None:
                done.add(int(step))
        return done

    def _write(self, name: str, doc: dict[str, Any]) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / name
        path.write_text(json.dumps(doc, indent=1) + "\n")
        return path

    def base(self) -> dict[str, Any]:
        doc = _whole(self.out / "base.json")
        if doc is not None:
            return doc
        log.info("scoring the base model once")
        doc = self.evaluate(None, "base")
        self._write("base.json", doc)
        return doc

    # --- one checkpoint --------------------------------------------------------------------

    def adapter_name(self, step: int) -> str:
        return f"{self.prefix}ckpt-{step}"

    def clean_slots(self) -> None:
        """Unload adapters a previous (crashed) watcher left behind under this watcher's prefix."""
        for name in self.loaded():
            if name.startswith(self.prefix):
                log.info("unloading leftover adapter %s", name)
                self.unload(name)

    def score(self, step: int, path: Path) -> dict[str, Any]:
        name = self.adapter_name(step)
        self.events.append({"event": "started", "step": step, "t": self.clock()})
        self.load(name, str(path))
        try:
            doc = self.evaluate(name, f"checkpoint-{step}")
        finally:
            self.unload(name)
        doc["step"], doc["adapter_path"] = step, str(path)
        base = self.base()
        if base.get("rows") and doc.get("rows"):  # same fixed subset: a paired comparison against the base
            verdicts = lambda d: {r["task_id"]: bool(r["correct"]) for r in d["rows"] if r["scorable"]}  # noqa: E731 - a one-line helper used right below
            doc["vs_base"] = paired(verdicts(base), verdicts(doc))
        self._write(f"checkpoint-{step}.json", doc)
        self.events.append({"event": "done", "step": step, "t": self.clock()})
        self.write_summary()
        return doc

    def write_summary(self) -> dict[str, Any]:
        base = _whole(self.out / "base.json")
        rows = []
        for step in sorted(self.done_steps()):
            doc = _whole(self.out / f"checkpoint-{step}.json")
            if doc is None:  # removed or rewritten since done_steps() read it
                continue
            s = doc["summary"]
            vs = doc.get("vs_base") or {}
            rows.append({"step": step, "pass@1": s["pass@1"]["pass@1"], "ci": s["pass@1"]["ci"],
                         "n": s["pass@1"]["n"], "unscorable": s["unscorable"], "mean_tokens": s["tokens"]["mean_total"],
                         "stop_reasons": s["stop_reasons"], "delta_vs_base": vs.get("delta"), "delta_ci": vs.get("ci")})
        bsum = base["summary"]["pass@1"] if base else None
        summary = {"source": self.source.describe(), "base": bsum and {**bsum, "mean_tokens": base["summary"]["tokens"]["mean_total"]},
                   "checkpoints": rows, "best": max(rows, key=lambda r: r["pass@1"] or -1, default=None)}
        self._write("summary.json", summary)
        charts.learning_curve(rows, self.out / "learning_curve.png", base=bsum, in_place=True)
        return summary

    # --- the loop ------------------------------------------------------------------------

    def poll_once(self) -> list[int]:
        """Score every complete checkpoint not yet scored, oldest first; returns the steps scored."""
        found = self.source.complete()
        todo = sorted(set(found) - self.done_steps())
        for step in todo:
            self.events.append({"event": "seen", "step": step, "t": self.clock()})
        scored = []
        for step in todo:
            log.info("scoring checkpoint-%d from %s", step, found[step])
            try:
                self.score(step, found[step])
            except Exception:
                # An env server or engine hiccup should not end a watcher that runs for hours: retry on
                # the next polls, and stop loudly once the same checkpoint failed `max_failures` times.
                self.failures[step] = self.failures.get(step, 0) + 1
                if self.failures[step] >= self.max_failures:
                    raise
                log.exception("checkpoint-%d failed (%d of %d tries); retrying on the next poll", step,
                              self.failures[step], self.max_failures)
                continue
            scored.append(step)
        return scored

    def run(self, *, stop_at_step: int | None = None, idle_exit_s: float | None = None) -> dict[str, Any]:
        """Poll until checkpoint `stop_at_step` is scored, or nothing new came for `idle_exit_s` (None: forever).

        A slow or stopped trainer just means empty polls; the watcher never gives up on its own.
        """
        self.clean_slots()
        self.base()
        self.write_summary()
        last_new = self.clock()
        while True:
            if self.poll_once():
                last_new = self.clock()
            done = self.done_steps()
            if stop_at_step is not None and any(s >= stop_at_step for s in done):
                break
            if idle_exit_s is not None and self.clock() - last_new >= idle_exit_s:
                log.info("no new checkpoint for %.0f s; stopping", idle_exit_s)
                break
            self.sleep(self.poll_s)
        return self.write_summary()
