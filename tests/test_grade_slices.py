"""labkit.grade.slices.cells_feeding: the cells a reader runs to reach one cell."""
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from labkit.grade.slices import cells_feeding


def test_only_the_cells_that_feed_the_target_with_the_first_and_the_check_that_rebinds():
    nb = new_notebook(cells=[
        new_markdown_cell("# title"),
        new_code_cell("import numpy as np"),                       # 1: always
        new_code_cell("a = np.ones(3)"),                           # 2: feeds b
        new_code_cell("unrelated = 5"),                            # 3: no
        new_code_cell("def f(x):\n    raise NotImplementedError"),  # 4: the answer cell
        new_code_cell('check("9.9", f)'),                          # 5: rebinds f
        new_code_cell("b = f(a)"),                                 # 6: feeds the target
        new_code_cell("slow_lab = sum(range(10**6))"),             # 7: no
        new_code_cell("show(b)"),                                  # 8: the target
    ])
    assert cells_feeding(nb, 8) == [1, 2, 4, 5, 6, 8]
    assert cells_feeding(nb, 3) == [1, 3]
    assert cells_feeding(nbformat.from_dict(nb), 1) == [1]
