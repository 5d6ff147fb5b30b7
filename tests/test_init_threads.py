""" An init leaves the process's threads as it found them: the caller's thread count is never changed, and no thread
the init started outlives it (either one left behind made later CPU training slower); its one-thread work computes as
the caller would, and an interruption of the caller waits for that work to end before the model is restored. """
import os
import signal
import threading
import time

import pytest
import timm
import torch

import timm_structinit
from timm_structinit.inits import threads as init_threads


def _small_vit():
    return timm.create_model('vit_tiny_patch16_224', depth=2, embed_dim=64, num_heads=2, img_size=64)


def _os_threads() -> int:
    return len(os.listdir('/proc/self/task'))


def _os_threads_after_exits(expected: int, wait: float = 10.0) -> int:
    """ The process's thread count once threads that were joined have left the kernel's list too (a joined thread
    ends a moment after its join returns), or after `wait` seconds. """
    deadline = time.monotonic() + wait
    while _os_threads() != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return _os_threads()


@pytest.mark.skipif(not os.path.isdir('/proc/self/task'), reason='counts threads through /proc')
@pytest.mark.parametrize('init', ['mimetic', 'impulse'])
def test_an_init_changes_no_thread_count_of_the_caller_and_leaves_no_thread(init, monkeypatch):
    torch.set_num_threads(2)  # the pools spread tasks over the caller's threads
    model = _small_vit()
    caller = threading.get_ident()
    set_from = []
    set_num_threads = torch.set_num_threads

    def recording(n):
        set_from.append(threading.get_ident())
        set_num_threads(n)
    monkeypatch.setattr(torch, 'set_num_threads', recording)
    before = _os_threads()
    timm_structinit.apply_init(model, init, seed=0)
    assert set_from, 'the init ran no one-thread work'  # the recording saw the init's own calls
    assert caller not in set_from
    assert torch.get_num_threads() == 2
    assert _os_threads_after_exits(before) == before
    assert not init_threads._pools


def test_parallel_tasks_called_outside_an_init_leave_the_callers_thread_count(monkeypatch):
    """ The diagnostics reach the pools without an init around them (the attention maps' statistics): the same rule
    holds there. """
    torch.set_num_threads(2)
    caller, set_from = threading.get_ident(), []
    set_num_threads = torch.set_num_threads

    def recording(n):
        set_from.append(threading.get_ident())
        set_num_threads(n)
    monkeypatch.setattr(torch, 'set_num_threads', recording)
    assert init_threads.parallel_tasks(lambda task: (task, torch.get_num_threads()), [1, 2, 3]) == \
        [(1, 1), (2, 1), (3, 1)]  # each task on one thread
    assert set_from and caller not in set_from
    assert torch.get_num_threads() == 2 and not init_threads._pools


def test_the_weights_do_not_depend_on_the_callers_threads():
    weights = []
    for n in (1, 2, 3):
        torch.set_num_threads(n)
        torch.manual_seed(0)  # the layers the init does not write
        model = _small_vit()
        timm_structinit.apply_init(model, 'impulse', seed=0)
        weights.append(model.blocks[1].attn.qkv.weight.clone())
    assert all(torch.equal(weights[0], w) for w in weights[1:])


def test_one_thread_work_computes_as_the_caller_would():
    seen = {}

    def probe():
        seen.update(grad=torch.is_grad_enabled(), threads=torch.get_num_threads(),
                    thread=threading.get_ident(), caller_threads=init_threads._caller_threads())
        return 'result'
    torch.set_num_threads(2)
    with torch.no_grad():
        assert init_threads.on_one_thread(probe) == 'result'
    assert seen == dict(grad=False, threads=1, thread=seen['thread'], caller_threads=2)
    assert seen['thread'] != threading.get_ident()
    with pytest.raises(KeyError, match='the same exception'):
        init_threads.on_one_thread(lambda: {}['the same exception'])


class _Stopped(Exception):
    pass


@pytest.mark.skipif(not hasattr(signal, 'SIGUSR1'), reason='needs SIGUSR1')
def test_an_interrupted_caller_waits_for_the_work_then_raises():
    ended = []

    def slow():
        time.sleep(0.6)
        ended.append(time.monotonic())

    def stop(signum, frame):
        raise _Stopped('stopped')
    previous = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(_Stopped):
            init_threads.on_one_thread(slow)
        raised = time.monotonic()
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert ended and ended[0] <= raised  # the work had ended when the caller saw its interruption


def test_an_init_interrupted_by_a_signal_leaves_the_model_as_it_was(monkeypatch):
    model = _small_vit()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    written = []

    def stop(signum, frame):
        raise _Stopped('stopped')
    original_copy = torch.Tensor.copy_

    def slow_copy(self, *args, **kwargs):  # the init is writing weights when the stop comes
        time.sleep(0.05)
        written.append(1)
        return original_copy(self, *args, **kwargs)
    previous = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGUSR1))
    monkeypatch.setattr(torch.Tensor, 'copy_', slow_copy)
    try:
        timer.start()
        with pytest.raises(_Stopped):
            timm_structinit.apply_init(model, 'mimetic', seed=0)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
        monkeypatch.undo()
    assert written
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert getattr(model, 'struct_init_record', None) is None


def test_inits_on_two_threads_each_keep_their_callers_thread_count():
    """ Two inits at once, from two threads of one process, the first ending while the second runs: the second still
    spreads its tasks over its caller's threads (it had been left with none, its tasks all on its helper thread). """
    first_inside, second_inside = threading.Event(), threading.Event()

    def first_init():
        first_inside.set()
        second_inside.wait(10)

    def first_caller():
        torch.set_num_threads(2)
        init_threads.on_one_thread(first_init)

    first = threading.Thread(target=first_caller)
    first.start()
    assert first_inside.wait(10)

    def second_init():
        second_inside.set()
        first.join(10)  # the first init has ended
        return init_threads.parallel_tasks(lambda _: threading.current_thread().name, range(4))

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        names = init_threads.on_one_thread(second_init)
    finally:
        torch.set_num_threads(threads)
    assert not first.is_alive()
    assert 'timm_structinit-init' not in names, names  # on the pool's threads, as a 2-thread caller's tasks run
