"""The per-episode worker: loads `context`, locks itself down, then runs code on request.

It runs in a child forked from the zygote and never returns; the host talks to it over
one Unix socket with frames from `wire`.
"""

from __future__ import annotations

import builtins
import io
import mmap
import os
import socket
import sys
import tokenize
import traceback
from typing import Any

from RestrictedPython import compile_restricted_exec

from fathom.env_server.sandbox import layers, toolbox, wire
from fathom.env_server.sandbox.guards import MODULE_PROXIES, ModuleProxy, SandboxViolation, restricted_globals
from fathom.env_server.sandbox.policy import SandboxPolicy, aug_attr, aug_item

EXIT_MEMORY = 86
EXIT_SETUP = 87
INJECTED = ("llm", "llm_batch", "FINAL", "FINAL_VAR", "SHOW_VARS", *toolbox.NAMES)


def _compile_toolbox() -> Any:
    res = compile_restricted_exec(toolbox.SOURCE, filename="<toolbox>", policy=SandboxPolicy)
    if res.errors:  # a broken toolbox must stop the pool from starting, not surface in episodes
        raise SyntaxError("; ".join(res.errors))
    return res.code


# Compiled once in the zygote (which imports this module); each worker only runs it.
_TOOLBOX_CODE = _compile_toolbox()
_TRACE_FRAMES = 5


class CappedText:
    """A write-only text sink that keeps the first `cap` characters and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap, self.size, self.dropped, self.parts = cap, 0, 0, []

    def write(self, s: Any) -> int:
        s = s if type(s) is str else str(s)
        room = self.cap - self.size
        if room > 0:
            piece = s[:room]
            self.parts.append(piece)
            self.size += len(piece)
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def flush(self) -> None:
        pass

    def getvalue(self) -> str:
        return "".join(self.parts)


class Worker:
    def __init__(self, sock: socket.socket, context: str, opts: dict[str, Any], variables: dict[str, str]) -> None:
        self.sock, self.opts = sock, opts
        self.stdout = self.stderr = CappedText(opts["read_cap_chars"])
        self.final: str | None = None
        self.llm_calls = 0
        worker = self

        class Printer:
            """Target of RestrictedPython's `print` rewrite; writes to the call's stdout."""

            def __init__(self, _getattr_: Any = None) -> None:
                pass

            def _call_print(self, *objects: Any, sep: str | None = " ", end: str | None = "\n",
                            file: Any = None, flush: bool = False) -> None:
                if file is not None:
                    raise SandboxViolation("print(file=...) is not available in the sandbox")
                builtins.print(*objects, sep=sep, end=end, file=worker.stdout)

            def __call__(self) -> str:
                return worker.stdout.getvalue()

        self.ns = restricted_globals(Printer)
        self.ns.update(_aug_item_=aug_item, _aug_attr_=aug_attr)
        self.ns.update(variables)
        helpers = restricted_globals(Printer)
        helpers.update(_aug_item_=aug_item, _aug_attr_=aug_attr)
        toolbox.install(self.ns, helpers, _TOOLBOX_CODE, context, MODULE_PROXIES["re"])
        self.ns.update(context=context, **{name: _plain(name, fn) for name, fn in (
            ("llm", self.llm), ("llm_batch", self.llm_batch), ("FINAL", self.final_),
            ("FINAL_VAR", self.final_var), ("SHOW_VARS", self.show_vars))})

    # --- functions visible inside the sandbox ------------------------------------------
    def llm(self, prompt: str) -> str:
        if not isinstance(prompt, str):
            raise TypeError(f"llm() takes a str prompt, got {type(prompt).__name__}")
        return self._llm([prompt])[0]

    def llm_batch(self, prompts: list[str]) -> list[str]:
        if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
            raise TypeError("llm_batch() takes a list of str prompts")
        return self._llm(list(prompts)) if prompts else []

    def _llm(self, prompts: list[str]) -> list[str]:
        size = sum(len(p) for p in prompts) * 4  # UTF-8 worst case; checked cheaply before encoding
        if size > self.opts["max_message_bytes"] - 4096 and \
                sum(len(p.encode("utf-8", "surrogatepass")) for p in prompts) > self.opts["max_message_bytes"] - 4096:
            raise ValueError(f"llm() prompts are too large to send (over {self.opts['max_message_bytes']:,} bytes; "
                             "sandbox.max_message_bytes): send smaller pieces of the context")
        wire.send(self.sock, {"op": "llm", "prompts": prompts})
        msg, _ = wire.recv(self.sock, 1 << 31)
        if not msg.get("ok"):
            raise RuntimeError(msg.get("error") or "llm() failed")
        self.llm_calls += len(prompts)
        return [str(r) for r in msg["results"]]

    def final_(self, answer: Any) -> None:
        text = answer if isinstance(answer, str) else str(answer)
        if len(text) > self.opts["read_cap_chars"]:
            raise ValueError(f"FINAL answer is {len(text):,} characters, over sandbox.read_cap_chars "
                             f"({self.opts['read_cap_chars']:,}); answer with the value, not the document")
        self.final = text

    def final_var(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"FINAL_VAR() takes a variable name as str, got {type(name).__name__}")
        if name.startswith("_") or name in INJECTED or name not in self.ns:
            raise NameError(f"FINAL_VAR: no variable named {name!r}; SHOW_VARS() lists the variables")
        self.final_(self.ns[name])

    def show_vars(self) -> dict[str, str]:
        return {k: "module" if isinstance(v, ModuleProxy) else type(v).__name__
                for k, v in self.ns.items() if not k.startswith("_") and k not in INJECTED}

    # --- one run ------------------------------------------------------------------------
    def run(self, code: str) -> dict[str, Any]:
        self.stdout = CappedText(self.opts["read_cap_chars"])
        self.stderr = CappedText(self.opts["read_cap_chars"])
        self.final, self.llm_calls = None, 0
        error = _check_identifiers(code)
        compiled = None
        if error is None:
            try:
                res = compile_restricted_exec(code, filename="<repl>", policy=SandboxPolicy)
                if res.errors:
                    error = "\n".join(res.errors)
                compiled = res.code
            except (RecursionError, MemoryError) as e:
                error = f"code could not be compiled ({type(e).__name__}): it is nested too deeply or too large"
            except (SyntaxError, ValueError) as e:
                error = f"code could not be compiled: {type(e).__name__}: {e}"
        if error is None and compiled is not None:
            sys.stdout, sys.stderr = self.stdout, self.stderr
            try:
                exec(compiled, self.ns)  # noqa: S102 - the sandbox's job: run the model's code under its guards
            except BaseException as e:  # noqa: BLE001 - user code may raise anything, SystemExit included
                error = _format_error(e, code)
            finally:
                sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        cap = self.opts["read_cap_chars"]
        return {
            "op": "done", "stdout": self.stdout.getvalue(), "stderr": self.stderr.getvalue(),
            "error": error[:cap] if error else None,
            "truncated": bool(self.stdout.dropped or self.stderr.dropped or (error and len(error) > cap)),
            "final_answer": self.final, "llm_calls": self.llm_calls,
        }

    def serve(self) -> None:
        while True:
            try:
                msg, _ = wire.recv(self.sock, 1 << 31)
            except (wire.WireError, OSError):
                os._exit(0)  # the host closed the episode
            if msg.get("op") != "run":
                continue
            try:
                out = self.run(msg["code"])
            except MemoryError:
                out = {"op": "done", "stdout": "", "stderr": "", "error": "MemoryError: out of memory",
                       "truncated": False, "final_answer": None, "llm_calls": self.llm_calls}
            wire.send(self.sock, out)


def _plain(name: str, method: Any) -> Any:
    """A plain function named `name` around a Worker method: it reprs as `<function llm>`."""
    def fn(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = method.__doc__
    return fn


def _check_identifiers(code: str) -> str | None:
    """Non-ASCII names are refused: NFKC folding would turn look-alikes into guarded names."""
    if code.isascii():
        return None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.NAME and not tok.string.isascii():
                return (f"non-ASCII identifier {tok.string!r} at line {tok.start[0]}: use ASCII letters, digits "
                        "and _ in names (strings and comments may hold any text)")
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None  # the compiler reports the syntax error itself
    return None


def _format_error(e: BaseException, code: str) -> str:
    """A traceback with only the sandbox's own frames, so worker internals stay private."""
    try:
        lines = code.splitlines()
        frames = [f for f in traceback.StackSummary.extract(traceback.walk_tb(e.__traceback__), lookup_lines=False)
                  if f.filename == "<repl>"]
        out = ["Traceback (most recent call last):"]
        if len(frames) > _TRACE_FRAMES:
            out.append(f"  [... {len(frames) - _TRACE_FRAMES} earlier frames ...]")
        for f in frames[-_TRACE_FRAMES:]:
            out.append(f"  line {f.lineno}, in {f.name}")
            if f.lineno and 0 < f.lineno <= len(lines):
                out.append("    " + lines[f.lineno - 1].strip()[:200])
        out.extend(s.rstrip("\n") for s in traceback.format_exception_only(type(e), e))
        return "\n".join(out)
    except BaseException:  # noqa: BLE001 - a hostile __str__ must not take the worker down
        return f"{type(e).__name__} (message unavailable)"


def child_main(sock_fd: int, ctx_fd: int, ctx_len: int, tmpdir: str, opts: dict[str, Any],
               variables: dict[str, str]) -> None:
    """Entry of a freshly forked worker. Never returns."""
    try:
        layers.set_parent_death_signal()
        sock = socket.socket(fileno=sock_fd)
        keep = sorted({0, 1, 2, sock_fd, ctx_fd})
        prev = -1
        for fd in keep:  # nothing of the zygote's (its control socket) may leak into the sandbox
            if fd > prev + 1:  # closerange(n, n) would pass last=n-1 to close_range(2): "close all"
                os.closerange(prev + 1, fd)
            prev = fd
        os.closerange(prev + 1, 1 << 16)
        null = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        os.chdir(tmpdir)
        if ctx_len:
            with mmap.mmap(ctx_fd, ctx_len, prot=mmap.PROT_READ) as mm:
                context = str(memoryview(mm), "utf-8", "surrogatepass")
        else:
            context = ""
        os.close(ctx_fd)
        sys.setrecursionlimit(opts["recursion_limit"])
        worker = Worker(sock, context, opts, variables)
        del context
        applied = ["restricted"]
        for name, fn in (
            ("rlimits", lambda: layers.apply_rlimits(opts["memory_limit_mb"], opts["episode_cpu_s"],
                                                     opts["file_size_mb"], opts["max_open_files"])),
            ("no_new_privs", layers.apply_no_new_privs),
            ("landlock", lambda: layers.apply_landlock(tmpdir, opts["read_paths"])),
            ("seccomp", layers.apply_seccomp),
        ):
            if name not in opts["layers"]:
                continue
            try:
                fn()
                applied.append(name)
            except Exception as e:  # noqa: BLE001 - reported to the host, which fails closed if required
                if name in opts["required"]:
                    wire.send(sock, {"op": "failed", "error": f"layer {name!r} could not be applied: {e}"})
                    os._exit(EXIT_SETUP)
        if opts.get("bwrap"):
            applied.append("bwrap")
        wire.send(sock, {"op": "ready", "layers": applied})
        worker.serve()
    except MemoryError:
        os._exit(EXIT_MEMORY)
    except BaseException as e:  # noqa: BLE001 - any set-up failure is reported to the host, then exit
        try:
            wire.send(socket.socket(fileno=os.dup(sock_fd)), {"op": "failed", "error": f"{type(e).__name__}: {e}"})
        except BaseException:  # noqa: BLE001 - the host socket is gone; the exit code still tells
            pass
        os._exit(EXIT_SETUP)
    os._exit(0)
