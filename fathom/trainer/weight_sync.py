"""Merged-weight sync to vLLM as TRL `WeightTransferProtocol`s, and the proxy's policy version after each.

TRL's `_sync_weight_merged` calls: pause() -> merge_adapter -> send_weights(iter of (name, tensor)) ->
unmerge_adapter -> resume() -> model_version += 1. So in `resume()` the version being published is
`trainer.model_version + 1`, and that is what the capture proxy is told (POST /policy/version), so new
sessions pin the new version while old ones keep their label.

- `DiskMergedSync` (CPU, and one GPU shared by trainer and vLLM): the tensors go to a safetensors directory, written under a dot-name and renamed
  (a reader never sees half a file), then vLLM reloads them: POST /collective_rpc reload_weights.
- `NcclMergedSync` (trainer and vLLM on different GPUs): TRL's own `WeightTransferClient`, built once the
  trainer's model exists. docs/trainer.md says why one GPU uses the disk.
Names are TRL's (`trl_compat.trainer.vllm_named_params`: PEFT prefixes stripped, LoRA tensors skipped). Tied
embeddings appear once, as `model.embed_tokens.weight`; vLLM's loader ties `lm_head` to it.

`ServedProbe` checks each sync from the outside: the logprobs vLLM serves for one fixed text, after this sync
against after the previous one (`sync/served_logprob_shift`), and the same text asked twice (`..._noise`).

A policy server or proxy restarted by `fathom launch` forgets what the syncs told it. Each sync records
the newest merged weights and the published version in `state_path` (`policy_state.json`), from which
the supervisor re-applies both; and each request retries through a restart for `retry_s`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from fathom.capture_proxy.client_core import ProxyCallError, merged_policy_version, report_policy_version

log = logging.getLogger(__name__)


class WeightSyncError(RuntimeError):
    """vLLM or the proxy refused a weight sync; training cannot go on with a stale or unknown policy."""


class MergedSync:
    """Pause/resume on vLLM's dev API, prefix-cache reset, and the proxy version report."""

    def __init__(self, *, vllm_url: str, proxy_url: str | None, timeout_s: float = 600.0,
                 http: httpx.Client | None = None, state_path: str | Path | None = None, retry_s: float = 0.0,
                 retry_poll_s: float = 2.0):
        self.vllm_url, self.proxy_url = vllm_url.rstrip("/"), (proxy_url or "").rstrip("/")
        self.timeout_s = timeout_s
        self.state_path = Path(state_path) if state_path else None
        self.retry_s, self.retry_poll_s = retry_s, retry_poll_s
        self.state: dict[str, Any] = {"version": 0, "weights_path": None}
        if http is None:
            # Imported here, not at the top: bench/gpu_device_check.py runs this class on a machine without pydantic.
            from fathom.config.security import shared_token
            from fathom.protocol import token_headers

            http = httpx.Client(timeout=timeout_s, headers=token_headers(shared_token()))  # the proxy may require it
        self.http = http
        self.trainer: Any = None
        self.sync_seconds: list[float] = []
        self._t0 = 0.0

    def bind(self, trainer: Any) -> "MergedSync":
        self.trainer = trainer
        return self

    def _post(self, url: str, **kw: Any) -> httpx.Response:
        r = self._retrying(f"POST {url}", lambda: self.http.post(url, **kw))
        if r.status_code != 200:
            raise WeightSyncError(f"POST {url} answered {r.status_code}: {r.text[:500]}")
        return r

    def _retrying(self, what: str, send: Callable[[], Any]) -> Any:
        # A transport error is a server dying or restarting under supervision: every request here is idempotent
        # (pause, reload a directory, reset, resume, report a version), so retry until `retry_s` is spent.
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                return send()
            except (httpx.TransportError, ProxyCallError) as e:
                if isinstance(e, ProxyCallError) and not e.no_answer:
                    raise WeightSyncError(str(e)) from e
                if time.monotonic() >= deadline:
                    raise WeightSyncError(f"{what} failed: {e!r}") from e
                log.warning("%s failed (%r); retrying while the server restarts", what, e)
                time.sleep(self.retry_poll_s)
            except httpx.HTTPError as e:
                raise WeightSyncError(f"{what} failed: {e!r}") from e

    def proxy_version(self, proxy_url: str | None = None) -> int:
        """The merged version the capture proxy (`proxy_url`, else this sync's) was last told, through the proxy's
        client; a failure is a WeightSyncError."""
        url = (proxy_url or self.proxy_url).rstrip("/")
        try:
            return merged_policy_version(self.http, url)
        except ProxyCallError as e:
            raise WeightSyncError(f"cannot read the capture proxy's policy version at {url}: {e}") from e

    def report_version(self, version: int, proxy_url: str | None = None) -> None:
        """Tell the capture proxy (`proxy_url`, else this sync's) the policy version vLLM now serves, through the
        proxy's client; retried through a proxy restart like every request here, and a refusal is a
        WeightSyncError."""
        url = (proxy_url or self.proxy_url).rstrip("/")
        self._retrying(f"POST {url}/policy/version", lambda: report_policy_version(self.http, url, version))

    def init_weight_transfer(self) -> None:
        # A resumed run may restart below the proxy's version (syncs after the last checkpoint); versions only
        # move forward there, so continue counting from the proxy's.
        if self.proxy_url and self.trainer is not None:
            current = self.proxy_version()
            if current > self.trainer.model_version:
                log.info("proxy is at policy version %d; continuing the count from there", current)
                self.trainer.model_version = current
                if self.trainer.rollout_worker is not None:
                    self.trainer.rollout_worker.update_model_version(current)

    def pause(self) -> None:
        self._t0 = time.monotonic()
        # keep: in-flight requests freeze and continue on the new weights after resume, nothing is aborted.
        self._post(f"{self.vllm_url}/pause", params={"mode": "keep"})

    def resume(self) -> None:
        try:
            self._publish()
        except BaseException:
            self._resume_after_failure()
            raise
        self._post(f"{self.vllm_url}/resume")
        self.sync_seconds.append(time.monotonic() - self._t0)

    def send_weights(self, iterator) -> None:
        """Hand the merged tensors to vLLM (`_transfer`). On any failure vLLM is resumed before the error goes on:
        TRL calls resume() only after a sync that returned (its `finally` unmerges, nothing more)."""
        try:
            self._transfer(iterator)
        except BaseException:
            self._resume_after_failure()
            raise

    def _transfer(self, iterator) -> None:
        raise NotImplementedError

    def _resume_after_failure(self) -> None:
        # A sync that fails stops the run, but vLLM must not stay paused meanwhile: every in-flight episode would
        # wait out its timeout first. It may now hold part of the new weights, and no new version was published.
        try:
            self._post(f"{self.vllm_url}/resume")
        except WeightSyncError as again:
            log.warning("could not resume vLLM after a failed sync: %s", again)

    def _publish(self) -> None:
        # Cached KV was computed by the old weights; preempted requests recompute theirs on the new ones.
        r = self._post(f"{self.vllm_url}/reset_prefix_cache", params={"reset_running_requests": "true"})
        if not r.json().get("success", False):
            raise WeightSyncError("vLLM could not reset its prefix cache after a weight reload; "
                                  "old-policy KV would be reused")
        # The proxy learns the new version while vLLM is still paused: a call answered after this was sent at the
        # old version only if the sync caught it in flight, and then its turn records both versions
        # (`policy_version_start` < `policy_version`), so the trainer never counts old-weight tokens on-policy.
        if self.proxy_url:
            version = (self.trainer.model_version if self.trainer is not None else len(self.sync_seconds)) + 1
            self.report_version(version)
            self._record(version=version)

    def _metric(self, key: str, value: float) -> None:
        """Into the bound trainer's next log line (`GRPOTrainerBase.log_metric`), beside TRL's perf/weight_sync_*."""
        log_metric = getattr(self.trainer, "log_metric", None)
        if log_metric is not None:
            log_metric(key, value)

    def _record(self, **changes: Any) -> None:
        """Write `state_path` whole, then rename: a supervisor never reads half of it."""
        self.state.update(changes)
        if self.state_path is None:
            return
        tmp = self.state_path.with_name(f".{self.state_path.name}.tmp")
        tmp.write_text(json.dumps(self.state) + "\n")
        os.replace(tmp, self.state_path)

    def destroy(self) -> None:
        self.http.close()


class DiskMergedSync(MergedSync):
    """Merged tensors -> safetensors directory (atomic rename) -> vLLM `reload_weights`.

    `directory` is a folder, or a function from the merged state dict's size in bytes to the folder, called once at
    the first sync (`merged_dir.choose`: tmpfs when it has room for two copies). After each reload only the
    directory vLLM now serves is kept (`keep` 1), so a sync holds at most two copies: that one and the new one."""

    def __init__(self, *, directory: str | Path | Callable[[int], Path], keep: int = 1, **kw: Any):
        super().__init__(**kw)
        self._choose = directory if callable(directory) else None
        self.directory: Path | None = None if callable(directory) else self._resolved(directory)
        self.keep = keep
        self.count = 0

    @staticmethod
    def _resolved(directory: str | Path) -> Path:
        return Path(directory).resolve()  # vLLM resolves the path in its own process

    def _transfer(self, iterator) -> None:
        try:
            self._write_and_reload(iterator)
        except OSError as e:
            raise WeightSyncError(f"writing merged weights under {self.directory} failed ({e}); free space "
                                  "there or point policy_server.merged_dir at a larger local disk") from e

    def _write_and_reload(self, iterator) -> None:
        from safetensors.torch import save_file

        # No copies: save_file has written every byte before it returns, and only then does the trainer unmerge
        # the adapter from these very tensors. A clone of the 540 MB model cost 0.3-5 s of the sync on 2 cores.
        t0 = time.monotonic()
        tensors = {name: t.detach().to("cpu").contiguous() for name, t in iterator}
        if self.directory is None:
            self.directory = self._resolved(self._choose(sum(t.nbytes for t in tensors.values())))
        self.count += 1
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"merged-{os.getpid()}-{self.count:06d}"
        tmp = self.directory / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        os.rename(tmp, final)
        # Recorded before the reload: if vLLM dies mid-sync, its restart loads these newest weights, which the
        # version reported by resume() will name.
        self._record(weights_path=str(final))
        t1 = time.monotonic()
        self._post(f"{self.vllm_url}/collective_rpc",
                   json={"method": "reload_weights", "kwargs": {"weights_path": str(final)}, "timeout": self.timeout_s})
        self._metric("perf/weight_sync_write_s", t1 - t0)
        self._metric("perf/weight_sync_reload_s", time.monotonic() - t1)
        self._prune(final)

    def _prune(self, current: Path) -> None:
        # vLLM's model path now points at `current`; older directories are no longer read.
        olds = sorted(p for p in self.directory.glob("merged-*") if p != current)
        for p in olds[: max(0, len(olds) - (self.keep - 1))]:
            shutil.rmtree(p, ignore_errors=True)


class NcclMergedSync(MergedSync):
    """Two GPUs: TRL's `WeightTransferClient` over NCCL (vLLM started with the NCCL weight-transfer config and dev mode).

    Written against TRL 1.15's API; not run in this repository's CPU-only CI.
    """

    def __init__(self, **kw: Any):
        super().__init__(**kw)
        self.client: Any = None

    def init_weight_transfer(self) -> None:
        from trl.experimental.async_grpo.weight_transfer import WeightTransferClient

        from fathom.trl_compat.trainer import vllm_named_params

        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        names, dtypes, shapes = [], [], []
        for name, param in vllm_named_params(model):
            names.append(name)
            dtypes.append(str(param.dtype).split(".")[-1])
            shapes.append(list(param.shape))
        self.client = WeightTransferClient(self.trainer.vllm_client,
                                           {"names": names, "dtype_names": dtypes, "shapes": shapes},
                                           weight_sync_timeout=int(self.timeout_s))
        self.client.init_weight_transfer()
        super().init_weight_transfer()

    def _transfer(self, iterator) -> None:
        self.client.send_weights(iterator)  # TRL's client finishes the weight update on a failure; the pause is ours

    def destroy(self) -> None:
        if self.client is not None:
            self.client.destroy()
        super().destroy()


PROBE_TEXT = (
    "Question: What is the magic number for amber-falcon?\n"
    "```repl\nimport re\nKEY = 'amber-falcon'\nfor m in re.finditer(KEY, context):\n"
    "    print(context[m.start() - 80 : m.end() + 80])\n```"
)
"""Text in the policy's own format, so that a GRPO step moves its logprobs; vLLM tokenizes it."""


@dataclass(frozen=True)
class ProbeResult:
    shift: float
    """The largest |change| of a token's logprob since the previous probe."""
    noise: float
    """The largest difference between the two answers to the same request."""
    seconds: float


class ServedProbe:
    """Did a sync reach the served weights? After each sync the trainer asks vLLM for the logprobs of the tokens of
    `PROBE_TEXT` (a prefill, not a capture: the proxy never sees it) and compares them with the previous sync's.

    The text is asked twice, and the largest difference between the two answers is the noise floor: bf16 kernels
    may round a prefill differently when it shares a batch with decodes. A shift above the noise means vLLM serves
    new weights. A failed request is a warning, not a stop: the probe only measures, and the next one starts a new
    baseline."""

    def __init__(self, *, vllm_url: str, model: str, timeout_s: float = 60.0, http: httpx.Client | None = None):
        self.url, self.model = f"{vllm_url.rstrip('/')}/v1/completions", model
        self.http = http or httpx.Client(timeout=timeout_s)
        self.last: list[float] | None = None

    def logprobs(self) -> list[float]:
        r = self.http.post(self.url, json={"model": self.model, "prompt": PROBE_TEXT, "max_tokens": 1,
                                           "temperature": 0.0, "prompt_logprobs": 0})
        r.raise_for_status()
        # prompt_logprobs[0] is None (the first token has no context); each later entry maps the token to its logprob
        return [next(iter(d.values()))["logprob"] for d in r.json()["choices"][0]["prompt_logprobs"][1:]]

    def check(self) -> ProbeResult | None:
        """Probe now: the change since the previous probe, or None on the first probe or a failed one."""
        t0 = time.monotonic()
        try:
            now, again = self.logprobs(), self.logprobs()
        except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as e:
            log.warning("served-logprob probe of %s failed (%r); the next sync starts a new baseline", self.url, e)
            self.last = None
            return None
        before, self.last = self.last, now
        if before is None or len(before) != len(now):
            return None
        return ProbeResult(shift=max((abs(a - b) for a, b in zip(before, now)), default=0.0),
                           noise=max((abs(a - b) for a, b in zip(now, again)), default=0.0),
                           seconds=time.monotonic() - t0)
