"""Disk merged sync against a fake vLLM and proxy: call order, atomic directory, version report, failures."""

from __future__ import annotations

import json

import httpx
import pytest
import torch
from safetensors.torch import load_file

from fathom.trainer.weight_sync import PROBE_TEXT, DiskMergedSync, ServedProbe, WeightSyncError


class FakeServers:
    def __init__(self, reload_status: int = 200, proxy_version: int = 0):
        self.calls: list[tuple[str, dict]] = []
        self.reload_status, self.proxy_version = reload_status, proxy_version
        self.seen_dirs: list[list[str]] = []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content) if req.content else {}
        self.calls.append((f"{req.url.host}{req.url.path}", body or dict(req.url.params)))
        if req.url.path == "/collective_rpc":
            from pathlib import Path

            d = Path(body["kwargs"]["weights_path"])
            self.seen_dirs.append(sorted(p.name for p in d.iterdir()))
            return httpx.Response(self.reload_status, json={"results": [None]})
        if req.url.path == "/reset_prefix_cache":
            return httpx.Response(200, json={"success": True})
        if req.url.path == "/policy":
            return httpx.Response(200, json={"merged_version": self.proxy_version})
        return httpx.Response(200, json={})


class Trainer:
    model_version = 0
    rollout_worker = None


def make(tmp_path, fake):
    sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url="http://vllm", proxy_url="http://proxy",
                          http=httpx.Client(transport=httpx.MockTransport(fake)))
    return sync.bind(Trainer())


def one_sync(sync, tensors):
    sync.pause()
    sync.send_weights(iter(tensors.items()))
    sync.resume()
    sync.trainer.model_version += 1  # what TRL does after resume()


def test_sync_order_reload_path_and_version_report(tmp_path):
    fake = FakeServers()
    sync = make(tmp_path, fake)
    sync.init_weight_transfer()
    w = {"model.embed_tokens.weight": torch.randn(4, 2), "model.layers.0.self_attn.q_proj.weight": torch.randn(2, 2)}
    one_sync(sync, w)
    paths = [c[0] for c in fake.calls]
    # the proxy hears the new version while vLLM is still paused (a call sent after it runs on the new weights)
    assert paths == ["proxy/policy", "vllm/pause", "vllm/collective_rpc", "vllm/reset_prefix_cache",
                     "proxy/policy/version", "vllm/resume"]
    rpc = fake.calls[2][1]
    assert rpc["method"] == "reload_weights"
    saved = load_file(rpc["kwargs"]["weights_path"] + "/model.safetensors")
    assert set(saved) == set(w) and torch.equal(saved["model.embed_tokens.weight"], w["model.embed_tokens.weight"])
    assert fake.calls[-2][1] == {"version": 1}
    assert fake.calls[1][1] == {"mode": "keep"}
    assert fake.seen_dirs == [["model.safetensors"]]  # complete when vLLM reads it
    assert not list((tmp_path / "merged").glob(".*"))  # no staging left


def test_written_weights_survive_the_unmerge(tmp_path):
    # The sync hands the trainer's own tensors to save_file (no copy); TRL unmerges them in place right after.
    fake = FakeServers()
    sync = make(tmp_path, fake)
    w = {"model.layers.0.mlp.up_proj.weight": torch.ones(3, 2)}
    one_sync(sync, w)
    w["model.layers.0.mlp.up_proj.weight"].sub_(1.0)  # what unmerge_adapter does to the merged weight
    saved = load_file(fake.calls[1][1]["kwargs"]["weights_path"] + "/model.safetensors")
    assert torch.equal(saved["model.layers.0.mlp.up_proj.weight"], torch.ones(3, 2))


def test_write_and_reload_times_go_to_the_trainers_log_window(tmp_path):
    from collections import defaultdict

    fake = FakeServers()
    sync = make(tmp_path, fake)
    got: dict = defaultdict(list)
    sync.trainer.log_metric = lambda name, value: got[name].append(value)  # GRPOTrainerBase's log window
    one_sync(sync, {"w": torch.zeros(2)})
    assert len(got["perf/weight_sync_write_s"]) == 1 and len(got["perf/weight_sync_reload_s"]) == 1
    assert all(v >= 0 for v in got["perf/weight_sync_write_s"] + got["perf/weight_sync_reload_s"])

def test_old_directories_are_pruned_and_versions_count_on(tmp_path):
    fake = FakeServers()
    sync = make(tmp_path, fake)
    copies = []

    def counting(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/collective_rpc":  # while vLLM reloads: the directory it served and the new one
            copies.append(len(list((tmp_path / "merged").glob("merged-*"))))
        return fake(req)

    sync.http = httpx.Client(transport=httpx.MockTransport(counting))
    for _ in range(4):
        one_sync(sync, {"w": torch.zeros(1)})
    # only what vLLM serves is kept, so a sync never holds more than two copies (what merged_dir.choose budgets)
    assert copies == [1, 2, 2, 2]
    left = list((tmp_path / "merged").glob("merged-*"))
    assert [str(p) for p in left] == [fake.calls[-4][1]["kwargs"]["weights_path"]]
    assert [c[1]["version"] for c in fake.calls if c[0] == "proxy/policy/version"] == [1, 2, 3, 4]


def test_a_folder_chosen_by_size_is_chosen_once_at_the_first_sync(tmp_path):
    asked = []

    def choose(need_bytes: int):
        asked.append(need_bytes)
        return tmp_path / "chosen"

    fake = FakeServers()
    sync = DiskMergedSync(directory=choose, vllm_url="http://vllm", proxy_url="http://proxy",
                          http=httpx.Client(transport=httpx.MockTransport(fake))).bind(Trainer())
    assert sync.directory is None
    for _ in range(2):
        one_sync(sync, {"a": torch.zeros(4, 2), "b": torch.zeros(3, dtype=torch.bfloat16)})
    assert asked == [4 * 2 * 4 + 3 * 2]  # the merged state dict's bytes, asked once
    reloaded = fake.calls[-4][1]["kwargs"]["weights_path"]
    assert reloaded.startswith(str((tmp_path / "chosen").resolve()) + "/merged-")


def test_resume_continues_from_the_proxys_version(tmp_path):
    fake = FakeServers(proxy_version=7)
    sync = make(tmp_path, fake)
    sync.init_weight_transfer()
    assert sync.trainer.model_version == 7
    one_sync(sync, {"w": torch.zeros(1)})
    assert fake.calls[-2][1] == {"version": 8}


def test_failed_reload_stops_loudly(tmp_path):
    sync = make(tmp_path, FakeServers(reload_status=500))
    sync.pause()
    with pytest.raises(WeightSyncError, match="collective_rpc answered 500"):
        sync.send_weights(iter({"w": torch.zeros(1)}.items()))


def test_state_file_names_the_newest_weights_and_version(tmp_path):
    fake = FakeServers()
    sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url="http://vllm", proxy_url="http://proxy",
                          state_path=tmp_path / "policy_state.json",
                          http=httpx.Client(transport=httpx.MockTransport(fake))).bind(Trainer())
    for _ in range(2):
        one_sync(sync, {"model.embed_tokens.weight": torch.randn(4, 2)})
    state = json.loads((tmp_path / "policy_state.json").read_text())
    assert state["version"] == 2
    assert state["weights_path"] == fake.calls[-4][1]["kwargs"]["weights_path"]  # the last reload's directory


@pytest.mark.parametrize("path", ["/collective_rpc", "/policy/version"])  # vLLM's reload; the proxy's client
def test_a_restarting_server_is_waited_for_then_the_sync_goes_on(tmp_path, path):
    fake, down = FakeServers(), {"left": 3}

    def flaky(req: httpx.Request) -> httpx.Response:
        if req.url.path == path and down["left"]:
            down["left"] -= 1
            raise httpx.ConnectError("connection refused", request=req)
        return fake(req)

    sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url="http://vllm", proxy_url="http://proxy",
                          retry_s=30, retry_poll_s=0.01,
                          http=httpx.Client(transport=httpx.MockTransport(flaky))).bind(Trainer())
    one_sync(sync, {"model.embed_tokens.weight": torch.randn(4, 2)})
    assert down["left"] == 0 and [c[0] for c in fake.calls][-2:] == ["proxy/policy/version", "vllm/resume"]

    down["left"] = 10**6
    sync.retry_s = 0.05
    with pytest.raises(WeightSyncError, match=f"{path} failed"):
        one_sync(sync, {"model.embed_tokens.weight": torch.randn(4, 2)})


class FakeProbeVllm:
    """/v1/completions with prompt_logprobs: answers `served[i]` (one logprob a token) to the i-th request."""

    def __init__(self, served: list[list[float] | int]):
        self.served, self.bodies = served, []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(req.content))
        lps = self.served[len(self.bodies) - 1]
        if isinstance(lps, int):  # an HTTP error status
            return httpx.Response(lps, json={"error": "down"})
        entries = [None] + [{str(100 + i): {"logprob": lp, "rank": 1}} for i, lp in enumerate(lps)]
        return httpx.Response(200, json={"choices": [{"text": "x", "prompt_logprobs": entries}]})


def probe(fake) -> ServedProbe:
    http = httpx.Client(transport=httpx.MockTransport(fake))
    return ServedProbe(vllm_url="http://vllm/", model="fathom-base", http=http)


def test_probe_shift_is_the_largest_change_since_the_previous_sync_and_noise_the_repeat():
    # each probe asks twice: baseline, then weights that moved token 2 by 0.25, with 0.001 of rounding noise
    fake = FakeProbeVllm([[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0], [-1.0, -2.25, -3.0], [-1.0, -2.251, -3.0]])
    p = probe(fake)
    assert p.check() is None  # the cold sync: a baseline only
    got = p.check()
    assert got.shift == pytest.approx(0.25) and got.noise == pytest.approx(0.001) and got.seconds >= 0
    assert fake.bodies[0] == {"model": "fathom-base", "prompt": PROBE_TEXT, "max_tokens": 1, "temperature": 0.0,
                              "prompt_logprobs": 0}


def test_unchanged_weights_give_no_shift():
    p = probe(FakeProbeVllm([[-1.0, -2.0]] * 4))
    p.check()
    assert p.check().shift == 0.0


def test_a_failed_probe_warns_and_the_next_starts_a_new_baseline(caplog):
    fake = FakeProbeVllm([[-1.0], [-1.0], 503, [-5.0], [-5.0], [-4.5], [-4.5]])
    p = probe(fake)
    p.check()
    with caplog.at_level("WARNING"):
        assert p.check() is None
    assert "served-logprob probe" in caplog.text and "503" in caplog.text
    assert p.check() is None  # not compared with the probe before the failure (two syncs apart)
    assert p.check().shift == pytest.approx(0.5)


def test_an_evaluated_stage_is_what_a_restarted_policy_server_gets_back(tmp_path, monkeypatch):
    """`fathom eval stages` reloads each stage's weights; the run's policy_state.json must then name that stage's,
    or a vLLM restart mid-evaluation would score the rest of an SFT stage on the GRPO weights trained last."""
    from fathom.stack.recovery import reapply_weights
    from fathom.trainer import adapters

    state = tmp_path / "policy_state.json"
    state.write_text(json.dumps({"version": 13, "weights_path": str(tmp_path / "grpo-merged")}))
    monkeypatch.setattr(adapters, "merged_tensors", lambda model_dir, adapter: iter({"w": torch.ones(2)}.items()))
    fake = FakeServers(proxy_version=13)
    version = adapters.serve_merged("model", "sft-adapter", vllm_url="http://vllm", proxy_url="http://proxy",
                                    directory=tmp_path / "weights" / "sft", state_path=state,
                                    http=httpx.Client(transport=httpx.MockTransport(fake)))
    reloaded = fake.calls[2][1]["kwargs"]["weights_path"]
    assert version == 14 and reloaded.startswith(str(tmp_path / "weights" / "sft"))
    assert json.loads(state.read_text()) == {"version": 14, "weights_path": reloaded}
    posted: list[dict] = []
    monkeypatch.setattr("fathom.stack.recovery.httpx.post",
                        lambda url, **kw: posted.append(kw["json"]) or httpx.Response(200, json={}))
    reapply_weights("http://vllm", state)(None)
    assert posted[0]["kwargs"]["weights_path"] == reloaded


def test_a_refused_version_report_stops_the_sync_at_once_naming_the_version(tmp_path):
    fake = FakeServers()

    def refusing(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/policy/version":
            fake.calls.append(("proxy/policy/version", json.loads(req.content)))
            return httpx.Response(409, json={"error": {"code": "wrong_sync_mode", "message": "adapter sync"}})
        return fake(req)

    sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url="http://vllm", proxy_url="http://proxy",
                          retry_s=30, retry_poll_s=0.01,
                          http=httpx.Client(transport=httpx.MockTransport(refusing))).bind(Trainer())
    with pytest.raises(WeightSyncError, match=r"reporting policy version 1 to http://proxy/policy/version.*409"):
        one_sync(sync, {"w": torch.zeros(1)})
    assert [c[0] for c in fake.calls][-2:] == ["proxy/policy/version", "vllm/resume"]  # asked once, vLLM resumed


def test_a_restarted_proxy_is_told_the_last_version_through_the_proxys_client(tmp_path, monkeypatch):
    from fathom.capture_proxy.client_core import ProxyCallError
    from fathom.stack.recovery import reapply_version

    seen: list[httpx.Request] = []
    status = {"code": 200}

    def proxy(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(status["code"], json={"merged_version": 6})

    client = httpx.Client
    monkeypatch.setattr("fathom.stack.recovery.httpx.Client",
                        lambda **kw: client(transport=httpx.MockTransport(proxy), **kw))
    state = tmp_path / "policy_state.json"
    state.write_text(json.dumps({"version": 6, "weights_path": None}))
    reapply_version("http://proxy", state, token="tok")(None)
    (req,) = seen
    assert (str(req.url), json.loads(req.content), req.headers["X-Fathom-Token"]) == (
        "http://proxy/policy/version", {"version": 6}, "tok")
    status["code"] = 409
    with pytest.raises(ProxyCallError, match="reporting policy version 6 to http://proxy/policy/version"):
        reapply_version("http://proxy", state)(None)


def test_a_proxy_that_refuses_the_version_read_stops_the_sync_before_it_starts(tmp_path):
    def locked(req: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "missing X-Fathom-Token"}})

    sync = DiskMergedSync(directory=tmp_path / "merged", vllm_url="http://vllm", proxy_url="http://proxy",
                          http=httpx.Client(transport=httpx.MockTransport(locked))).bind(Trainer())
    with pytest.raises(WeightSyncError, match=r"policy version at http://proxy.*401.*X-Fathom-Token"):
        sync.init_weight_transfer()
