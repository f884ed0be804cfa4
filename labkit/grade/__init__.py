"""The instructor's side: generate learner notebooks, restore check cells, grade submissions.

Importing this package before nbformat saves about a second in every process the grader
starts (each notebook run is a fresh pytest): nbformat imports jsonschema, which imports
``rfc3987_syntax`` when it is installed (JupyterLab's dependencies bring it) and that
compiles a Lark grammar at import time, for the ``iri`` string format that no notebook
schema uses (nbformat's schemas name no ``format``; tested). Marking the module absent makes
jsonschema skip that one format checker, as it does when the package is not installed.
"""
import sys

sys.modules.setdefault("rfc3987_syntax", None)
