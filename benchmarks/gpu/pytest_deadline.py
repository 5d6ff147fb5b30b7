""" A pytest plugin for benchmarks/gpu/run.sh: once the time in $PYTEST_DEADLINE (seconds since the epoch) has
passed, every test not started yet is skipped, so that a run cut short still ends, reports what ran and writes its
JUnit file (a signal would not do: the training command's own stop handlers catch SIGINT and SIGTERM).

    PYTEST_DEADLINE=$(( $(date +%s) + 230 )) python -m pytest -p pytest_deadline ...   (benchmarks/gpu on PYTHONPATH)
"""
import os
import time

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    deadline = float(os.environ.get('PYTEST_DEADLINE') or 'inf')
    if time.time() > deadline:
        pytest.skip('not run: the time budget of benchmarks/gpu/run.sh for the tests was spent')
