"""Where simulation runs execute: in this process, a local process pool, or Ray.

One place checks the execution options (`check_backend`): the backend name, `--jobs` (at least
1; capped at the CPUs this process may use, since more workers than cores only add memory and
contention), `--address` (only with `--backend ray`; a host:port nothing answers on is refused in
seconds, naming `--address`, instead of Ray's own minutes-long retry) and whether Ray is importable.

Local pools use the spawn context. Their workers die with their parent: each worker polls its
parent's pid (``os.getppid()``) from a daemon thread and exits when the parent is gone, so a
SIGKILL'ed or SIGTERM'ed `specsim run` leaves no orphaned workers (within about a second), and
ignores SIGINT (Ctrl-C goes to the parent, which stops the pool). On any exception in the parent
the workers are terminated rather than waited for.

Progress inside a run. `run_tasks(..., on_progress=f)` calls `f(task, RunProgress)` in this
thread as a running task reports how far it is (sim/progress.py: responses finished, RL steps
done; at most every `progress_every_s` s), and `f(task, None)` once its result has been
delivered. In this process (one worker) the simulation calls it directly. A local pool's workers
put their reports on one queue the pool's initializer hands them (the worker's only channel to
its parent, set once per worker process); the parent drains it while it waits for results
(every PROGRESS_POLL_S) and before it delivers a result. The queue is a SimpleQueue, written in
the worker's own thread, so a run's last report is in the pipe before its result is sent: every
report of a run reaches the parent, in order, before its result. Ray: progress at run
granularity only -- the tasks report nothing while they run and the caller sees each run when it
ends: a sign of life from a remote task would need an actor every task writes to (ray.util.queue),
a cluster-wide object for what is a display. Without `on_progress` nothing is created and the
runs see no hook.

Ray: with `address` (a running cluster: ``host:port`` of its head, or ``auto``; ``ray://`` Ray Client
addresses are refused, and a host:port where something other than a Ray head listens is refused
within seconds: it must answer an HTTP/2 preface as a gRPC server does) it
connects, sending Ray's auth token when one is available and RAY_AUTH_MODE is unset
(`use_ray_token_auth`), and a cluster that refuses is one error naming `--address` (`ray_refused`); without, it always starts a private local instance of `jobs` CPUs
(``ray.init(address="local")``), also when a Ray head already runs on this machine, and shuts it
down afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import math
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specsim.errors import LayoutError, SpecError, os_reason
from specsim.inputs import resolve_input
from specsim.scenario import ScenarioError, validate_doc
from specsim.sim.pipeline import RunStopped, run_pipeline
from specsim.sim.progress import PROGRESS_EVERY_S, ProgressHook, RunProgress
from specsim.study.sweep import RunTask, k_of
from specsim.world.resolve import resolve

__all__ = ["WorkerPool", "available_cpus", "check_backend", "execute", "run_tasks", "sigint_latch",
           "worker_pool"]

BACKENDS = ("local", "ray")
#: Seconds to wait for a TCP answer from a Ray address before refusing it.
ADDRESS_TIMEOUT_S = 5.0
#: How often a worker checks that its parent is alive.
PARENT_POLL_S = 0.25
#: How often the parent drains its workers' progress reports while it waits for results.
PROGRESS_POLL_S = 0.2
#: What the parent hears of a running task: (task, its progress), then (task, None) once it ended.
OnProgress = Callable[[RunTask, RunProgress | None], None]
#: follow_up(task, result) -> the tasks to queue next (run_tasks)
FollowUp = Callable[[RunTask, dict], list[RunTask]]
#: deliver(task, result) -> its follow-up tasks: run_tasks' own callback to the backends
Deliver = Callable[[RunTask, dict], list[RunTask]]


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def check_backend(backend: str, jobs: int, address: str | None = None, *, probe: bool = True) -> int:
    """Validate the execution options; return the number of workers to use (jobs capped at the
    CPUs). Raises SpecError naming `--backend`, `--jobs` or `--address`."""
    if backend not in BACKENDS:
        raise SpecError("--backend", backend, "'local' or 'ray'", where="command line")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SpecError("--jobs", jobs, "a whole number >= 1", where="command line")
    if address is not None and backend != "ray":
        raise SpecError("--address", address, "given only with --backend ray (the address of a Ray cluster)",
                        where="command line")
    if backend == "ray":
        if address is not None:
            use_ray_token_auth()   # before Ray is imported: it reads the mode once
        _ray()
        if address is not None and probe:
            _probe_address(address)
    return min(jobs, available_cpus()) if backend == "local" or address is None else jobs


def _ray():
    try:
        import ray
    except ImportError:
        raise SpecError("--backend", "ray", "'local', or 'ray' with Ray installed (install specsim[ray]: "
                        "pip install 'specsim[ray]')", where="command line") from None
    return ray


#: HTTP/2 client preface + an empty SETTINGS frame: a Ray GCS (a gRPC server) answers with its
#: own SETTINGS frame at once; anything else (a web server, a database, a plain socket) does not.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _probe_address(address: str) -> None:
    """Refuse, within seconds, a Ray address nothing answers on, or where something that is not a
    Ray cluster listens (Ray itself retries for many minutes): the GCS is a gRPC (HTTP/2) server,
    so it must answer an HTTP/2 preface with a SETTINGS frame. `ray://` (Ray Client) addresses
    are refused with what to give instead."""
    if address in ("auto", "local"):
        return
    if address.startswith("ray://"):
        raise SpecError("--address", address, "the host:port of a running Ray cluster's head (the GCS address "
                        "`ray start --head` prints, port 6379 by default) or 'auto'; ray:// (Ray Client) addresses "
                        "are not supported: the tasks need the cluster's own scheduler", where="command line")
    hostport = address.split("://", 1)[1] if "://" in address else address
    host, sep, port_text = hostport.rstrip("/").rpartition(":")
    allowed = "'auto' or the host:port of a running Ray cluster's head"
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SpecError("--address", address, allowed, where="command line")
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=ADDRESS_TIMEOUT_S) as conn:
            conn.settimeout(ADDRESS_TIMEOUT_S)
            conn.sendall(_H2_PREFACE)
            head = b""
            while len(head) < 9:
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        raise SpecError("--address", address, f"{allowed}; nothing answers there: {os_reason(exc)}",
                        where="command line") from None
    if len(head) < 9 or head[3] != 0x04:
        raise SpecError("--address", address, f"{allowed}; something listens there, but it is not a Ray cluster "
                        "(it does not speak gRPC/HTTP/2 as a Ray head does)", where="command line")


# ============================================================================ one run
def execute(task: RunTask | dict, progress: ProgressHook | None = None,
            progress_every_s: float = PROGRESS_EVERY_S) -> dict:
    """Run one pipeline (in any process). Returns {"key", "steady", "steps", "meta"} or, for a
    scenario that cannot run (does not fit, bad layout), {"key", "error"} with the message, or,
    for a task with `stop_above_s` that the run provably cannot come in under, {"key", "stopped":
    {"step", "floor_step_s", "stop_above_s"}} (sim/pipeline.RunStopped: no result).
    `progress`: the run's progress hook (sim/progress.py); the result does not depend on it."""
    t = task if isinstance(task, RunTask) else RunTask(**task)
    try:
        sc = validate_doc(t.doc, t.file)
        sc._source_file = t.file
        world = resolve(sc)
        res = run_pipeline(world, engine=t.engine, replicate=t.replicate, progress=progress,
                           progress_every_s=progress_every_s, engine_results=False, stop_above_s=t.stop_above_s)
    except (ScenarioError, SpecError, LayoutError) as exc:
        return {"key": t.key, "error": f"{exc.__class__.__name__}: {exc}"}
    except RunStopped as stop:
        return {"key": t.key, "stopped": {"step": stop.step, "floor_step_s": stop.floor_step_s,
                                          "stop_above_s": stop.stop_above_s}}
    steady = {k: float(v) for k, v in res.steady().items()}
    steady["per_token_sd_gain"] = per_token_sd_gain(world, steady)
    steps = [{k: (float(v) if isinstance(v, float) else int(v)) for k, v in asdict(r).items()} for r in res.records]
    meta = {"scenario": sc.name, "mode": sc.pipeline.mode, "policy": world.policy.label, "engines": world.engines,
            "gpus_per_engine": world.layout.gpus, "rollout_gpus": sc.rollout.gpus,
            "training_gpus": sc.training_gpus, "total_gpus": sc.total_gpus, "replicate": t.replicate,
            "warmup_steps": res.warmup_steps, "role": t.role}
    return {"key": t.key, "steady": steady, "steps": steps, "meta": meta}


def per_token_sd_gain(world, steady: dict) -> float:
    """τ × decode step ÷ SD step at the run's steady mean active batch, from its cost table (the
    gain a token sees at that batch, before the tail, the spread and the pipeline; NaN for AR).
    Context per sequence: the mean prompt plus half the mean response."""
    k = k_of(world.scenario)
    tau = steady.get("tau", float("nan"))
    batch = steady.get("token_weighted_batch")
    if batch is None or not math.isfinite(batch):
        batch = steady.get("mean_active_batch", float("nan"))
    if k == 0 or k not in world.table.ks or not (math.isfinite(tau) and math.isfinite(batch) and batch > 0):
        return float("nan")
    w = world.workload
    ctx = world.prompt_dist.mean_tokens(w.max_prompt_tokens) + 0.5 * world.response_dist.mean_tokens(w.max_response_tokens)
    return float(tau / world.table.sd_over_decode(k, batch, ctx))


# ============================================================================ local pool
def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)   # the parent is gone: nobody will read our result
        time.sleep(PARENT_POLL_S)


#: In a pool worker only: (queue, seconds between reports), its line to the parent's progress
#: display, set once by `_worker_init`; None in the parent and in a pool without a display.
_worker_progress: tuple | None = None


def _worker_init(parent_pid: int, progress_queue=None, progress_every_s: float = PROGRESS_EVERY_S) -> None:
    """Pool worker start-up: die with the parent; leave Ctrl-C to the parent; keep the queue
    progress reports go to; at exit, skip the garbage collections over the simulation's objects
    (gc.freeze, as cli/launch.py does for the command: a worker exits while its parent writes the
    tables, on the same cores)."""
    global _worker_progress
    atexit.register(gc.freeze)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="specsim-parent-watch").start()
    if progress_queue is not None:
        _worker_progress = (progress_queue, progress_every_s)
    # the simulation's imports, paid now (while the parent plans its study) rather than in the first task
    for module in ("specsim.sim.pipeline", "specsim.world.resolve"):
        importlib.import_module(module)


def _started() -> None:
    """A pool's first task per worker: nothing (submitting it starts the worker's process)."""


def _execute_in_worker(index: tuple[int, int], task: RunTask) -> dict:
    """`execute` in a pool worker, its progress reports put on the parent's queue as
    ((call, task index), report)."""
    if _worker_progress is None:
        return execute(task)
    q, every_s = _worker_progress

    def report(progress) -> None:
        try:
            q.put((index, progress))
        except OSError:   # the parent closed its queue (it is shutting down): a report is best-effort
            pass

    return execute(task, progress=report, progress_every_s=every_s)


def _kill_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued, terminate the workers and wait (2 s at most each) for them and for the
    executor's manager thread: a manager thread still alive at interpreter exit is woken through
    its pipe by concurrent.futures' exit hook, and on CPython 3.11 that write can meet the pipe the
    thread has just closed, printing "Exception ignored … OSError: [Errno 9] Bad file descriptor"
    after an interrupted command's last line."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.terminate()
        except (OSError, ValueError, AttributeError):  # already gone
            pass
    for p in procs:
        try:
            p.join(timeout=2)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass
    if manager is not None and manager is not threading.current_thread():
        manager.join(timeout=2)


@contextlib.contextmanager
def sigint_latch() -> Iterator[threading.Event]:
    """While the block runs, Ctrl-C (SIGINT) raises KeyboardInterrupt as usual *and* sets the
    yielded event; SIGTERM, where its default action is in place, raises :class:`Terminated` (a
    KeyboardInterrupt) and sets it too, so the pool is shut down the same way instead of leaking
    semaphores. Why the event: Python drops an exception raised inside a finalizer (a generator
    or object collected at that moment -- a simulation discards thousands), printing "Exception
    ignored"; a Ctrl-C that lands there would be lost and the sweep would run to its end. The task
    loop checks the event after every delivered result, the CLI when a command ends
    (cli/common.py user_errors). Only in the main thread. SIGINT is left alone where it is ignored
    (a background job of a non-interactive shell: `specsim run ... &` in a script, whose SIGINT the
    shell sets to SIG_IGN); SIGTERM is handled there all the same, since a job run in the
    background is the one a `kill`, a `timeout` or a scheduler ends. The previous handlers are
    restored afterwards."""
    latched = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield latched
        return

    def on_signal(signum, frame):
        latched.set()
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    previous_int = signal.signal(signal.SIGINT, on_signal) if \
        signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None) else None
    previous_term = signal.signal(signal.SIGTERM, on_signal) if \
        signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None) else None
    try:
        yield latched
    finally:
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)


#: the signals that stop a command (sigint_latch), which a pool's start defers (stop_signals_deferred)
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends; the first that came then reaches the handler
    in place as if it arrived then (`signal.raise_signal`; an ignored signal stays ignored). A pool starts its workers
    here: a spawned worker reads its start-up data from a pipe its parent writes after starting it,
    and a KeyboardInterrupt raised between the two would leave the pipe half written -- the worker
    would print multiprocessing's "EOFError: Ran out of input" traceback after the command's
    "interrupted" line. Handlers, not the signal mask: CPython runs a handler in the main thread
    whichever thread the kernel delivers the signal to (numpy's BLAS threads do not block it).
    Only in the main thread, where handlers can be set."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum, frame):
        caught.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in STOP_SIGNALS
                if signal.getsignal(sig) not in (signal.SIG_IGN, None)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


class Terminated(KeyboardInterrupt):
    """SIGTERM (a `timeout`, a scheduler's kill) while a command ran: handled as Ctrl-C is (the
    worker pool shut down, its semaphores released, every finished point kept), and the command
    exits 143 as a terminated process does."""


class WorkerPool:
    """A local spawn-context pool kept across several `run_tasks` calls of one command (`pool`).

    Starting a pool costs each worker a fresh interpreter and the simulation's imports (about 1-2 s
    on 2 cores); a command that runs its tasks in phases (a sweep, then the capacity plan built
    from its best point) pays that once. The workers start when the pool is made, not at its
    first task, and import the simulation then (`_worker_init`): a command that makes its pool
    before it plans its study has them ready when the first task comes. Progress reports carry
    the call they belong to, so a report can never be read as one of a later call's tasks."""

    def __init__(self, workers: int, with_reports: bool, progress_every_s: float = PROGRESS_EVERY_S):
        ctx = multiprocessing.get_context("spawn")
        self.workers = workers
        self.reports = ctx.SimpleQueue() if with_reports else None
        self.calls = 0
        args = (os.getpid(),) if self.reports is None else (os.getpid(), self.reports, progress_every_s)
        self.executor = None
        try:
            with stop_signals_deferred():
                self.executor = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                                    initargs=args)
                for _ in range(workers):            # a task for no idle worker starts one more process
                    self.executor.submit(_started)
        except BaseException:                       # a Ctrl-C that waited for the start: the pool goes
            if self.executor is not None:
                self.kill()
            raise

    def kill(self) -> None:
        _kill_pool(self.executor)
        self.close_queue()

    def release(self) -> None:
        """Let the workers go once their tasks are done, without waiting for them to exit: a command
        that has no more tasks (the run, once its capacity plan is in) writes its tables and summary
        while they exit. The interpreter joins them at its exit (concurrent.futures' exit hook);
        `shutdown` afterwards only closes the progress queue. A pool never given a task is killed
        (`shutdown`)."""
        if self.calls == 0:
            self.kill()
            return
        self.executor.shutdown(wait=False)

    def shutdown(self) -> None:
        """Wait for the workers to exit; a pool that was never given a task (a resumed run with
        nothing left to compute) is killed instead: its workers may still be importing."""
        if self.calls == 0:
            self.kill()
            return
        self.executor.shutdown(wait=True)
        self.close_queue()

    def close_queue(self) -> None:
        if self.reports is not None:
            self.reports.close()
            self.reports = None


@contextlib.contextmanager
def worker_pool(jobs: int, backend: str = "local", address: str | None = None, *, reports: bool = False,
                progress_every_s: float = PROGRESS_EVERY_S) -> Iterator[WorkerPool | None]:
    """A WorkerPool for the `run_tasks` calls inside the block (None where there is none to keep:
    Ray, or one worker, which runs in this process). It starts on entry; on an exception its
    workers are killed, otherwise waited for. `reports`: its workers report progress inside their
    runs, so every `run_tasks` call on it must take `on_progress` (a queue nobody reads fills up
    and stops the workers)."""
    workers = check_backend(backend, jobs, address, probe=False)
    if backend == "ray" or workers == 1:
        yield None
        return
    pool = WorkerPool(workers, reports, progress_every_s)
    try:
        yield pool
    except BaseException:
        pool.kill()
        raise
    else:
        pool.shutdown()


def run_tasks(tasks: list[RunTask], on_result: Callable[[RunTask, dict], None], *, jobs: int = 2,
              backend: str = "local", address: str | None = None, on_progress: OnProgress | None = None,
              progress_every_s: float = PROGRESS_EVERY_S, pool: WorkerPool | None = None,
              follow_up: FollowUp | None = None) -> None:
    """Execute `tasks`, calling `on_result(task, result)` in this thread as each finishes.

    backend="local": one worker runs in this process; otherwise a spawn-context process pool of
    min(jobs, CPUs, tasks) workers. backend="ray": see the module docstring. A Ctrl-C stops the
    loop with KeyboardInterrupt, at the latest right after the next result is delivered
    (`sigint_latch`). `on_progress`: progress inside the running tasks (module docstring),
    reported at most every `progress_every_s` seconds per task (0: at every check). `pool`: a
    WorkerPool (`worker_pool`) to run on and leave running, instead of a pool of this call's own.
    `follow_up(task, result)`: called after `on_result`; the tasks it returns join the queue
    behind those not yet started (a command whose next phase needs only part of this one's
    results submits it while the rest still runs: study/runner.py's capacity plan), and the
    call returns once every task, given or followed up, is done."""
    workers = check_backend(backend, jobs, address, probe=False)
    if not tasks:
        return
    with sigint_latch() as interrupted:
        def deliver(task: RunTask, result: dict) -> list[RunTask]:
            on_result(task, result)
            more = list(follow_up(task, result)) if follow_up is not None else []
            if on_progress is not None:
                on_progress(task, None)
            if interrupted.is_set():
                raise KeyboardInterrupt
            return more
        _run_tasks(tasks, deliver, workers, backend, address, on_progress, progress_every_s, pool)


def _run_tasks(tasks: list[RunTask], deliver: Deliver, workers: int, backend: str,
               address: str | None, on_progress: OnProgress | None = None,
               progress_every_s: float = PROGRESS_EVERY_S, pool: WorkerPool | None = None) -> None:
    if backend == "ray":
        _run_ray(_ray(), tasks, deliver, workers, address)   # progress at run granularity (module doc)
        return
    if pool is None and min(workers, len(tasks)) == 1:
        queue = list(tasks)
        while queue:
            t = queue.pop(0)
            if on_progress is None:
                queue += deliver(t, execute(t))
            else:
                queue += deliver(t, execute(t, progress=lambda p, t=t: on_progress(t, p),
                                            progress_every_s=progress_every_s))
        return
    if pool is not None:
        _run_on(pool, tasks, deliver, on_progress)
        return
    own = WorkerPool(min(workers, len(tasks)), on_progress is not None, progress_every_s)
    try:
        _run_on(own, tasks, deliver, on_progress)
    except BaseException:
        own.kill()
        raise
    else:
        own.shutdown()


def _run_on(pool: WorkerPool, tasks: list[RunTask], deliver: Deliver, on_progress: OnProgress | None) -> None:
    """Every task on `pool`'s workers, results delivered in this thread as they finish (and each
    delivery's follow-ups submitted behind the queued tasks); progress reports of this call
    (tagged with its number) handed to `on_progress`, others dropped."""
    pool.calls += 1
    call = pool.calls
    reports = pool.reports if on_progress is not None else None
    tasks = list(tasks)      # grows by the follow-ups: a report's index reads it

    def drain() -> None:
        while not reports.empty():   # one reader (this thread): a non-empty queue's get does not block
            (c, i), p = reports.get()
            if c == call:
                on_progress(tasks[i], p)

    def submit(new: list[RunTask]) -> None:
        for t in new:
            tasks.append(t)
            pending[pool.executor.submit(_execute_in_worker, (call, len(tasks) - 1), t)] = len(tasks) - 1

    pending = {pool.executor.submit(_execute_in_worker, (call, i), t): i for i, t in enumerate(tasks)}
    while pending:
        done, _ = wait(list(pending), timeout=None if reports is None else PROGRESS_POLL_S,
                       return_when=FIRST_COMPLETED)
        if reports is not None:
            drain()
        for fut in done:
            i = pending.pop(fut)
            submit(deliver(tasks[i], fut.result()))


# ============================================================================ ray
def shippable(task: dict) -> dict:
    """A task whose input paths are absolute, as a worker on another machine (or in another
    folder) needs them: the scenario file, a hardware profile given as a path, and the length
    files (looked up as resolve does: as written, else next to the scenario file)."""
    t = dict(task)
    doc = json_copy(t["doc"])
    file = t.get("file")
    base = Path(file).resolve().parent if file else None
    hw = doc.get("hardware")
    if isinstance(hw, str) and ("/" in hw or hw.lower().endswith((".yaml", ".yml"))):
        doc["hardware"] = _absolute(hw, base)
    for name in ("response_tokens", "prompt_tokens"):
        spec = (doc.get("workload") or {}).get(name)
        if isinstance(spec, dict) and isinstance(spec.get("path"), str) and spec["path"]:
            spec["path"] = _absolute(spec["path"], base)
    t["doc"] = doc
    if file:
        t["file"] = resolve_input(file)
    return t


def _absolute(path: str, base: Path | None) -> str:
    p = Path(path).expanduser()
    if p.is_absolute():
        return str(p)
    if p.exists() or base is None:
        return str(p.absolute())
    return str((base / p).absolute())


def json_copy(doc: dict) -> dict:
    return json.loads(json.dumps(doc))



#: Ray's token authentication (Ray >= 2.52; on by default for a head Ray 2.59+ starts): the mode
#: variable, the token's variables and its default file, as Ray reads them
RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


def ray_token_source() -> str | None:
    """Where a Ray auth token is available to this process (Ray's own order: RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token), or None."""
    if os.environ.get(RAY_AUTH_TOKEN):
        return RAY_AUTH_TOKEN
    if os.environ.get(RAY_AUTH_TOKEN_PATH):
        return f"{RAY_AUTH_TOKEN_PATH} ({os.environ[RAY_AUTH_TOKEN_PATH]})"
    default = Path.home() / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def use_ray_token_auth() -> None:
    """Send the token to an explicit --address when one is available and RAY_AUTH_MODE is unset.
    Ray does this itself only for address 'auto' (ray._private.worker: an explicit address "never
    does"), so a head started with token authentication -- the default from Ray 2.59 once
    ~/.ray/auth_token exists, which any local ray.init() writes -- refused `--address host:port`
    after ~20 s of InvalidAuthToken retries. An explicit RAY_AUTH_MODE is respected."""
    if os.environ.get(RAY_AUTH_MODE) is None and ray_token_source() is not None:
        os.environ[RAY_AUTH_MODE] = "token"


def ray_refused(address: str, exc: BaseException) -> SpecError:
    """The error when a Ray cluster refuses this process: what Ray said, and what to set."""
    mode, token = os.environ.get(RAY_AUTH_MODE), ray_token_source()
    here = (f"here {RAY_AUTH_MODE}={mode}" if mode is not None else f"here {RAY_AUTH_MODE} is unset") + \
        (f" and the token comes from {token}" if token else " and no token is available")
    return SpecError("--address", address, "a running Ray cluster this process can connect to and authenticate "
                     f"with; Ray says: {exc}. A head started with token authentication (Ray >= 2.52; the default "
                     f"from 2.59) refuses a client without its token: set {RAY_AUTH_MODE}=token and give the "
                     f"head's token as {RAY_AUTH_TOKEN}, {RAY_AUTH_TOKEN_PATH} or ~/.ray/auth_token "
                     f"(`ray get-auth-token` on the head prints it); {here}", where="command line")


def _run_ray(ray: Any, tasks: list[RunTask], deliver: Deliver, jobs: int, address: str | None) -> None:
    started = False
    if not ray.is_initialized():
        kwargs = {"ignore_reinit_error": True, "log_to_driver": False, "include_dashboard": False}
        if address:
            use_ray_token_auth()
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:   # refused: one error paragraph
                raise ray_refused(address, exc) from None
        else:   # a private local instance, even when a Ray head already runs on this machine
            ray.init(address="local", num_cpus=jobs, **kwargs)
            started = True
    try:
        remote = ray.remote(num_cpus=1)(execute)
        # --jobs is the most tasks in flight (and never more than the cluster's CPUs)
        resources = getattr(ray, "cluster_resources", None)
        cpus = int(((resources() if resources else None) or {}).get("CPU", jobs) or jobs)
        limit = max(1, min(jobs, cpus))
        queue = list(tasks)
        refs: dict = {}
        pending: list = []
        while queue or pending:
            while queue and len(pending) < limit:
                t = queue.pop(0)
                ref = remote.remote(shippable(asdict(t)))
                refs[ref] = t
                pending.append(ref)
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                queue += deliver(refs.pop(ref), ray.get(ref))
    finally:
        if started:
            ray.shutdown()
