""" Thread-count-independent init math.

Linear algebra on CPU gives different bits for different thread counts (MKL splits the work differently), and
torchrun runs one thread per process: `on_one_thread` runs the init math on one thread, so the same seed gives the
same weights whatever `torch.get_num_threads()` says, and `parallel_tasks` / `parallel_map` spread fixed pieces of
the work over the caller's threads, each piece on one thread, to keep the speed without changing the bits.

Nothing of this outlives the init: the one-thread work runs on a helper thread, so the caller's own thread count is
never changed, and the pools' threads end with the init. Either one left behind made the rest of the process slower:
a ViT-T training step on 2 CPU cores ran 10-20% slower after a thread's OpenMP team had shrunk to one and grown back,
or while idle pool threads (each with its own OpenMP state) outlived the init
(`benchmarks/results/init_aftereffect.txt`).
"""
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, Iterator, List, Sequence, Tuple, TypeVar

import torch

__all__ = ['on_one_thread', 'one_thread', 'denormals_flushed', 'parallel_tasks', 'parallel_map']

T = TypeVar('T')
R = TypeVar('R')

# the thread count outside `one_thread` (0 outside it), of each thread: inits on two threads of one process are two
# callers, each with its own count
_caller = threading.local()
_pools: Dict[int, ThreadPoolExecutor] = {}  # kept between the calls of one init: a solver maps its tasks every step
_pools_lock = threading.Lock()
_pool_users = 0  # the `_pools_kept` scopes open now; the last one to end shuts the pools down
_in_worker = threading.local()
_on_helper = threading.local()  # set on the helper thread of `on_one_thread`


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """ Run the enclosed torch CPU work on one thread (restoring the caller's count), for thread-count-independent
    results. `parallel_tasks` may still spread independent pieces over the caller's threads. """
    threads, outer = torch.get_num_threads(), _caller_threads()
    _caller.threads = outer or threads
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        _caller.threads = outer


def _caller_threads() -> int:
    return getattr(_caller, 'threads', 0)


def on_one_thread(fn: Callable[..., R], *args, **kwargs) -> R:
    """ fn(*args, **kwargs) inside `one_thread()`, on a helper thread that computes as the caller would (its grad
    mode, denormal mode, and CUDA device and stream), returning fn's result or raising its exception. The caller
    waits for fn to end even when it is interrupted (Ctrl-C, a stop signal), then re-raises the interruption: fn
    never runs on behind the caller's back. """
    outcome: Dict[str, object] = {}
    grad, flush, threads = torch.is_grad_enabled(), _flushing_denormals(), torch.get_num_threads()
    # CUDA's current device and stream belong to a thread: the writes go where the caller's next kernels expect them
    stream = torch.cuda.current_stream() if torch.cuda.is_initialized() else None
    ended = threading.Event()

    def run() -> None:
        _on_helper.active = True
        try:
            torch.set_flush_denormal(flush)
            torch.set_num_threads(threads)  # a new thread starts at torch's default count; `one_thread` reads this
            on_stream = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
            with torch.set_grad_enabled(grad), on_stream, one_thread(), _pools_kept():
                outcome['result'] = fn(*args, **kwargs)
        except BaseException as e:  # handed to the caller, whatever it is
            outcome['error'] = e
        finally:
            ended.set()

    helper = threading.Thread(target=run, name='timm_structinit-init', daemon=True)
    helper.start()
    interrupted = None
    while True:
        try:
            # an Event first, not Thread.join: a join interrupted by a signal handler's exception marks the thread
            # ended while it runs on; once fn has ended, the join only waits for the thread to exit
            ended.wait()
            helper.join()
            break
        except BaseException as e:  # keep waiting: the caller restores what fn was writing once it has ended
            interrupted = interrupted or e
    if interrupted is not None:
        raise interrupted
    if 'error' in outcome:
        raise outcome['error']
    return outcome['result']


@contextlib.contextmanager
def denormals_flushed() -> Iterator[None]:
    """ Flush denormal floats to zero in the enclosed CPU work of this thread (and of the `parallel_tasks` it runs),
    restoring the caller's setting. A softmax over wide logits fills its tails with denormals, which the CPU
    handles up to ~100x slower; as zeros they change nothing the inits compute. """
    previous = _flushing_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(previous)


def _flushing_denormals() -> bool:
    # the smallest float32 normal is 1.2e-38: 1e-39 survives an operation only if denormals are kept
    return bool((torch.full((1,), 1e-39) * 1.0).item() == 0.0)


@contextlib.contextmanager
def _pools_kept() -> Iterator[None]:
    """ Keep the pools `parallel_tasks` makes until the outermost of these scopes ends, then end their threads. """
    global _pool_users
    with _pools_lock:
        _pool_users += 1
    try:
        yield
    finally:
        with _pools_lock:
            _pool_users -= 1
            ending = list(_pools.values()) if _pool_users == 0 else []
            if ending:
                _pools.clear()
        for pool in ending:
            pool.shutdown(wait=True)


def _pool(workers: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if workers not in _pools:
            _pools[workers] = ThreadPoolExecutor(workers, initializer=_mark_worker)
        return _pools[workers]


def _mark_worker() -> None:
    _in_worker.active = True


def parallel_tasks(fn: Callable[[T], R], tasks: Sequence[T]) -> List[R]:
    """ [fn(task) for task in tasks], each call on one thread, the calls spread over the caller's thread count.

    The caller fixes the tasks, so they must not depend on the thread count; then neither do the bits of the
    results. A call from inside a task runs its tasks in place; a call from any other thread than an init's helper
    goes through one, as the init does. """
    if not getattr(_on_helper, 'active', False) and not getattr(_in_worker, 'active', False):
        return on_one_thread(parallel_tasks, fn, tasks)
    with one_thread(), _pools_kept():
        workers = min(_caller_threads(), len(tasks))
        if workers > 1 and not getattr(_in_worker, 'active', False):
            flush = _flushing_denormals()

            def as_caller(task):  # a worker computes as the caller would: one thread, the caller's denormal mode
                torch.set_flush_denormal(flush)
                return fn(task)
            return list(_pool(workers).map(as_caller, tasks))  # torch releases the GIL inside its kernels
        return [fn(task) for task in tasks]


def parallel_map(fn: Callable[[torch.Tensor], Tuple[torch.Tensor, ...]], batch: torch.Tensor, chunk: int = 4):
    """ fn over fixed chunks of `batch`, each on one thread, spread over the caller's thread count; results are
    concatenated. The chunks do not depend on the thread count, so neither do the bits of the result. """
    parts = parallel_tasks(fn, batch.split(chunk))
    return tuple(torch.cat(p) for p in zip(*parts))
