""" One-line errors of Hub requests (network, authentication, permissions), and the token kept out of everything. """
import importlib
from pathlib import Path
from typing import Optional, Tuple, Union

__all__ = ['HubError']


class HubError(RuntimeError):
    """ A Hub request failed (network, authentication, permissions): the message is one line and holds no token. """


def one_line(error: Union[BaseException, str]) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def scrub(text: str, token: Optional[str]) -> str:
    return text.replace(token, '***') if token else text


def transport_errors() -> Tuple[type, ...]:
    """ Exceptions a Hub request raises: the HTTP library's base error (httpx2 / httpx) and OSError (requests). """
    errors = [OSError]  # HfHubHTTPError and requests' errors are OSErrors
    for module in ('httpx2', 'httpx'):
        try:
            errors.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _is_connection_error(error: BaseException) -> bool:
    # httpx / httpx2 transport errors and requests' ConnectionError / Timeout are not builtin ConnectionErrors
    module = type(error).__module__.split('.')[0]
    return isinstance(error, (ConnectionError, TimeoutError)) or module in ('httpx2', 'httpx', 'requests', 'urllib3')


def explain_hub_error(error: BaseException, repo_id: str, revision: Optional[str], token: str) -> str:
    """ One line saying what went wrong with a push to `repo_id` and what to check, without the token. """
    from huggingface_hub import errors as hf_errors
    status = getattr(getattr(error, 'response', None), 'status_code', None)
    server_message = getattr(error, 'server_message', None)
    detail = one_line(server_message) if server_message else one_line(error)
    if isinstance(error, hf_errors.RevisionNotFoundError):
        msg = f'revision {revision!r} of {repo_id} not found: {detail}'
    elif isinstance(error, hf_errors.RepositoryNotFoundError):
        msg = f'repository {repo_id} not found or not accessible with this token: {detail}'
    elif status in (401, 403):
        msg = (f'not authorized to push to {repo_id} (HTTP {status}): check that the token (HF_TOKEN or '
               f'`hf auth login`) is valid and has write access to {repo_id.split("/")[0]}')
    elif isinstance(error, hf_errors.OfflineModeIsEnabled):
        msg = 'the Hugging Face Hub is unreachable in offline mode (HF_HUB_OFFLINE is set)'
    elif isinstance(error, hf_errors.HfHubHTTPError):
        msg = f'the Hub refused the upload to {repo_id} (HTTP {status}): {detail}'
    elif _is_connection_error(error):
        msg = f'cannot reach the Hugging Face Hub ({type(error).__name__}: {detail})'
    else:  # e.g. a local file that could not be read while uploading
        msg = f'upload to {repo_id} failed ({type(error).__name__}: {detail})'
    return scrub(msg, token)


def resolve_token(token: Optional[str]) -> str:
    """ `token`, else the one huggingface_hub finds (HF_TOKEN or the saved login); HubError if there is none. """
    if token is not None:
        if not isinstance(token, str) or not token:
            raise ValueError('token must be a non-empty string or None (then HF_TOKEN or the saved login is used)')
        return token
    import huggingface_hub
    try:
        found = huggingface_hub.get_token()
    except Exception as e:  # e.g. a failed OIDC exchange
        raise HubError(f'could not read the Hugging Face token: {one_line(e)}') from None
    if not found:
        raise HubError('no Hugging Face token found: set HF_TOKEN or run `hf auth login`, then push again')
    return found


def refuse_token_in_files(folder: Path, token: str) -> None:
    # the text files are built from model and checkpoint metadata: make sure none carried the token along
    for name in ('config.json', 'README.md'):
        if token in (folder / name).read_text(encoding='utf-8'):
            raise HubError(f'refusing to upload: {name} contains the Hugging Face token (check the checkpoint args)')
