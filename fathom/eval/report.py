"""Write an evaluation's outputs: results JSON, episodes JSONL, Pareto PNG and the offline HTML report.

The HTML page is one file with its data, styles, script and chart inline: it opens from a bucket,
an e-mail attachment or a laptop with no network. Episode trees are built in the browser only when
a node is expanded, so a report of hundreds of episodes opens fast.
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from itertools import zip_longest
from pathlib import Path
from typing import Any

from fathom.eval import charts
from fathom.protocol import EpisodeResult

TEMPLATE = Path(__file__).with_name("report_template.html")


def pareto_points(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"label": label, "pass@1": m["summary"]["pass@1"]["pass@1"], "ci": m["summary"]["pass@1"]["ci"],
             "mean_tokens": m["summary"]["tokens"]["mean_total"]} for label, m in results["models"].items()]


def pick_episodes(items: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most `limit` episodes, round-robin over (model, family, outcome) so every kind stays visible."""
    if len(items) <= limit:
        return items
    groups: dict[tuple, list] = defaultdict(list)
    for it in items:
        r = it["row"]
        groups[(it["label"], r["family"], "u" if not r["scorable"] else bool(r["correct"]))].append(it)
    picked = [it for batch in zip_longest(*groups.values()) for it in batch if it is not None]
    return picked[:limit]


def render_html(results: dict[str, Any], episodes: list[dict[str, Any]], *, pareto_png: bytes | None = None,
                limit: int = 200) -> str:
    """`episodes`: {label, row, episode} dicts (episode = EpisodeResult as JSON)."""
    shown = pick_episodes(episodes, limit)
    data = {k: results[k] for k in ("split", "n_tasks", "created", "sampling", "confidence", "comparisons")}
    data["models"] = {label: {"model": m["model"], "summary": m["summary"]} for label, m in results["models"].items()}
    data["episodes"], data["episodes_total"] = shown, len(episodes)
    data["pareto_png"] = base64.b64encode(pareto_png).decode() if pareto_png else None
    # `<` escaped: model output may contain "</script>", which would end the data block early.
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    title = " vs ".join(results["models"]).replace("<", "&lt;")
    return TEMPLATE.read_text().replace("__TITLE__", title).replace("__DATA__", blob)


def write_outputs(results: dict[str, Any], episodes: dict[str, list[EpisodeResult]], out_dir: str | Path,
                  *, report_episodes: int = 200) -> dict[str, Path]:
    """results.json, episodes.jsonl, pareto.png and report.html under `out_dir`; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results": out / "results.json", "episodes": out / "episodes.jsonl", "pareto": out / "pareto.png",
             "report": out / "report.html"}
    _atomic(paths["results"], json.dumps(results, indent=1) + "\n")
    items = []
    lines = []
    for label, eps in episodes.items():
        rows = {r["episode_id"]: r for r in results["models"][label]["rows"]}
        for ep in eps:
            doc = ep.model_dump(mode="json")
            lines.append(json.dumps({"label": label, "episode": doc}))
            items.append({"label": label, "row": rows[ep.episode_id], "episode": doc})
    _atomic(paths["episodes"], "\n".join(lines) + "\n")
    charts.pareto(pareto_points(results), paths["pareto"])
    html = render_html(results, items, pareto_png=paths["pareto"].read_bytes(), limit=report_episodes)
    _atomic(paths["report"], html)
    return paths


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
