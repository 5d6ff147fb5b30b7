""" The Hub reachability check before any work goes through huggingface_hub's own request path: its endpoint (a mirror
through HF_ENDPOINT), the proxies its HTTP session honours, and its offline mode. """
from types import SimpleNamespace

import pytest
from huggingface_hub import constants
from huggingface_hub import utils as hub_utils

# huggingface_hub 1.x closes its cached session with close_session(); 0.x drops it with reset_sessions()
close_session = getattr(hub_utils, 'close_session', None) or hub_utils.reset_sessions

from timm_structinit.hub import probe

# nothing listens on port 9 of this machine (discard): a connection there is refused at once
CLOSED = 'http://127.0.0.1:9'


@pytest.fixture(autouse=True)
def fresh_session(monkeypatch):
    """ huggingface_hub builds its HTTP session (and reads the proxies) once: a new one per test, and after it. """
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    close_session()
    yield
    close_session()


def test_a_mirror_is_probed_not_huggingface_co(monkeypatch):
    monkeypatch.setattr(constants, 'ENDPOINT', CLOSED)
    why = probe.hub_unreachable(timeout=5)
    assert why is not None and why.startswith('127.0.0.1 is unreachable (') and 'huggingface.co' not in why


def test_the_probe_goes_through_the_proxy(monkeypatch):
    """ A proxy that refuses: unreachable, though the Hub's own host is never contacted (the raw socket to port 443
    this replaced ignored proxies). """
    monkeypatch.setattr(constants, 'ENDPOINT', 'https://hub.invalid')  # would fail to resolve if asked directly
    for name in ('HTTPS_PROXY', 'https_proxy', 'ALL_PROXY', 'all_proxy', 'NO_PROXY', 'no_proxy'):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv('HTTPS_PROXY', CLOSED)
    why = probe.hub_unreachable(timeout=5)
    assert why is not None and why.startswith('hub.invalid is unreachable (') and 'refused' in why.lower()


def test_any_http_answer_means_reachable(monkeypatch):
    requests = []

    class Session:
        def head(self, url, timeout):
            requests.append((url, timeout))
            return SimpleNamespace(status_code=503)  # what the Hub says is the download's to report

    monkeypatch.setattr('huggingface_hub.utils.get_session', lambda: Session())
    assert probe.hub_unreachable(timeout=2.0) is None
    assert requests == [(constants.ENDPOINT, 2.0)]


@pytest.mark.parametrize('how', ['constant', 'environment'])
def test_offline_mode_is_huggingface_hubs(monkeypatch, how):
    if how == 'constant':  # HF_HUB_OFFLINE as huggingface_hub read it at its import
        monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
    else:  # or set since
        monkeypatch.setenv('HF_HUB_OFFLINE', 'yes')
    monkeypatch.setattr('huggingface_hub.utils.get_session', lambda: pytest.fail('no request in offline mode'))
    assert probe.hub_offline()
    assert 'offline mode' in probe.hub_unreachable()
