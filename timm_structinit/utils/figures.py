""" Figures without pyplot (no GUI backend, no global state), matplotlib being an optional dependency; each figure
is written to a temporary file and renamed into place. """
from pathlib import Path
from typing import Any, Union

from .atomic import atomic_file, write_refused
from .write_failures import write_failure_reason

__all__ = ['new_figure', 'save_figure', 'epoch_axis']


def new_figure(**kwargs: Any) -> Any:
    """ A `matplotlib.figure.Figure(**kwargs)`, with an error that says how to install matplotlib. """
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError('figures need matplotlib: pip install "timm-structinit[plots]"') from err
    return Figure(**kwargs)


def save_figure(fig: Any, out: Union[str, Path], **savefig_kwargs: Any) -> Path:
    """ Lay out `fig` and write it to `out` (its folder made if missing) under a temporary name, then rename. """
    out = Path(out)
    fig.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(out) as tmp:
            fig.savefig(tmp, **savefig_kwargs)
    except OSError as e:  # a full or read-only file system: name the figure, not the staging file
        raise write_refused(f'cannot write the figure {out}: {write_failure_reason(e, str(out))}', e) from None
    return out


def epoch_axis(ax: Any, label: str = 'epoch') -> None:
    """ Label `ax`'s x axis `label`, its ticks on whole epochs only (matplotlib's own choice puts them at 2.5, 7.5,
    ... on a run of a dozen epochs). """
    from matplotlib.ticker import MaxNLocator
    ax.set_xlabel(label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))

