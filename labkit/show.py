"""The one way a widget displays a figure: show it in the output area, then close it.

Every chapter's widgets (``labkit/<package>/widgets.py``) call :func:`show` from their
draw function, so a redraw replaces the figure and no figure leaks memory.
"""
from __future__ import annotations


def show(fig) -> None:
    """Display ``fig`` (a matplotlib Figure) in the current output and close it."""
    import matplotlib.pyplot as plt  # deferred: matplotlib
    from IPython.display import display

    display(fig)
    plt.close(fig)
