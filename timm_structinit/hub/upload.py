""" Uploading an export folder to the Hugging Face Hub as one commit, and every failure of it as one line that says
what to check and holds no token (`HubError`). """
from pathlib import Path
from typing import Any, Optional

import huggingface_hub

from ..errors import HubError
from ..version import __version__

__all__ = ['HubError']


def _one_line(error: Any) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _upload(folder: Path, repo_id: str, token: str, private: bool, revision: Optional[str], message: str) -> str:
    """ The export folder as one commit, with huggingface_hub's `create_repo`, `create_branch` and `upload_folder`
    (timm's `push_to_hf_hub` makes these calls too, but writes timm's generic card where the repo has none, and
    creates no branch); the commit's URL. """
    api = huggingface_hub.HfApi(token=token, library_name='timm_structinit', library_version=__version__)
    try:
        repo_url = api.create_repo(repo_id, repo_type='model', private=private, exist_ok=True)
        repo_id = getattr(repo_url, 'repo_id', None) or repo_id  # as the Hub spells it
        if revision not in (None, 'main') and not revision.startswith('refs/'):
            api.create_branch(repo_id, branch=revision, repo_type='model', exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id, folder_path=str(folder), repo_type='model', revision=revision, commit_message=message)
    except Exception as e:  # network, authentication, permissions, a file that could not be read: one line
        raise HubError(_explain_hub_error(e, repo_id, revision).replace(token, '***')) from None
    return getattr(info, 'commit_url', None) or str(repo_url)


def _explain_hub_error(error: Exception, repo_id: str, revision: Optional[str]) -> str:
    """ What went wrong with a push to `repo_id`, and what to check. """
    from huggingface_hub import errors
    status = getattr(getattr(error, 'response', None), 'status_code', None)
    detail, kind = _one_line(getattr(error, 'server_message', None) or error), type(error).__name__
    if isinstance(error, errors.RevisionNotFoundError):
        return f'revision {revision!r} of {repo_id} not found: {detail}'
    if isinstance(error, errors.RepositoryNotFoundError):
        return f'repository {repo_id} not found or not accessible with this token: {detail}'
    if status in (401, 403):
        return (f'not authorized to push to {repo_id} (HTTP {status}): check that the token (HF_TOKEN or '
                f'`hf auth login`) is valid and has write access to {repo_id.split("/")[0]}')
    if isinstance(error, errors.OfflineModeIsEnabled):
        return 'the Hugging Face Hub is unreachable in offline mode (HF_HUB_OFFLINE is set)'
    if isinstance(error, errors.HfHubHTTPError):
        return f'the Hub refused the upload to {repo_id} (HTTP {status}): {detail}'
    # the HTTP clients' transport errors are not builtin ConnectionErrors
    if isinstance(error, (ConnectionError, TimeoutError)) or type(error).__module__.split('.')[0] in (
            'httpx2', 'httpx', 'requests', 'urllib3'):
        return f'cannot reach the Hugging Face Hub ({kind}: {detail})'
    return f'upload to {repo_id} failed ({kind}: {detail})'
