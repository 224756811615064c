"""Held-out evaluation, the per-checkpoint watcher, charts, the offline report and adapter export.

    runner.EvalRunner   episodes through the env server, each in a non-trainable proxy session pinned to a model
    metrics / stats     per-episode rows, summaries, pass@1 with bootstrap intervals, paired comparison
    report / charts     results.json, episodes.jsonl, pareto.png, report.html (recursion trees, filters)
    watch / checkpoints score each complete checkpoint-N once, from a directory, a mounted bucket or the Hub
    export              adapter + model card + eval results, loadable by PEFT and `vllm serve --lora-modules`
"""
