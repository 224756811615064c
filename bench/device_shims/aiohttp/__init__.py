"""Import stand-in for `aiohttp`, used by bench/gpu_device_check.sh only when the GPU machine lacks it. TRL 1.15's
default rollout worker imports it at module level to call vLLM; the check injects its own worker, so nothing here
is ever called: any attribute is a class that refuses to be used."""


def __getattr__(name: str):
    class _Unavailable:
        def __init__(self, *a, **k):
            raise RuntimeError(f"aiohttp.{name}: aiohttp is not installed (bench/device_shims stand-in)")

    _Unavailable.__name__ = name
    return _Unavailable
