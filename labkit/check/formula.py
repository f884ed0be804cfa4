"""One checker for the exercises whose answer is a number computed from a few arguments.

Such a checker runs the learner's function and the reference on a table of cases. Where
they disagree it names the tempting wrong formula (a *shortcut*) the answer matches, so
the hint says what is missing rather than only "off by x"::

    formula_exercise("11.2", "Daly's checkpoint interval", daly_interval,
                     cases=[(300.0, 86400.0), (7200.0, 3600.0)],
                     call=lambda c, m: f"daly_interval(C={c:g} s, M={m:g} s)",
                     shortcuts=[(equals(lambda c, m: math.sqrt(2 * c * m)), "that is Young's ..."),
                                (lambda got, c, m: c >= 2 * m, "Daly's interval is simply M.")],
                     hint="τ = √(2CM)·[1 + ⅓√(C/2M) + ⅑(C/2M)] − C for C < 2M.")

registers exercise 11.2; its checker (:func:`check_formula`) answers Young's √(2CM) with
``daly_interval(C=300 s, M=86400 s) = 7200, expected 7001.39: that is Young's ...``.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from labkit.check.core import Wrong, exercise

Shortcut = tuple[Callable[..., bool], str]     # (test(got, *case) -> bool, hint)


def equals(*wrongs: Callable[..., float], rtol: float = 1e-9) -> Callable[..., bool]:
    """The test "the answer is what one of the wrong formulas ``wrong(*case)`` gives" (to
    ``rtol``): ``equals(lambda c, m: math.sqrt(2 * c * m))``."""
    if not wrongs:
        raise TypeError("equals needs at least one wrong formula")
    return lambda got, *case: any(math.isclose(got, wrong(*case), rel_tol=rtol)
                                  for wrong in wrongs)


def scaled(fn: Callable[..., float], *factors: float, rtol: float = 1e-9
           ) -> Callable[..., bool]:
    """The test "the answer is k × ``fn(*case)`` for one of ``factors``" (to ``rtol``): the
    factor 8 of bits for bytes, ``scaled(ridge_point, 8, 1 / 8)``; a percentage for a
    fraction, ``scaled(mfu, 100)``."""
    if not factors:
        raise TypeError("scaled needs at least one factor")

    def test(got, *case):
        value = fn(*case)
        return any(math.isclose(got, k * value, rel_tol=rtol) for k in factors)
    return test


def perturbed(case: Sequence[Any], rng) -> tuple:
    """A case like ``case`` with each positive number scaled by a random factor in [1/2, 2]
    (integers stay integers, at least 1; other values unchanged): fresh inputs of the
    same kind, so outputs typed in for the known cases fail."""
    out = []
    for v in case:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            out.append(v)
        elif isinstance(v, int):
            out.append(max(1, int(round(v * 2 ** rng.uniform(-1, 1)))))
        else:
            out.append(float(v * 2 ** rng.uniform(-1, 1)))
    return tuple(out)


def drawn_cases(cases: Sequence[Sequence[Any]], reference: Callable[..., float], rng,
                draw: Callable | None = None, count: int = 3) -> list[tuple]:
    """``count`` fresh cases: ``draw(rng)``, or a perturbed copy of a random known case;
    a drawn case that the reference refuses (ValueError) is drawn again (a few times)."""
    out: list[tuple] = []
    for _ in range(count * 8):
        if len(out) == count:
            break
        case = tuple(draw(rng)) if draw is not None else perturbed(
            cases[int(rng.integers(len(cases)))], rng)
        try:
            float(reference(*case))
        except (ValueError, ZeroDivisionError, OverflowError):
            continue
        except Exception:
            continue
        out.append(case)
    return out


def check_formula(answer: Callable[..., Any], reference: Callable[..., float],
                  cases: Iterable[Sequence[Any]], *, call: Callable[..., str],
                  shortcuts: Sequence[Shortcut] = (), hint: str,
                  rtol: float = 1e-9, atol: float = 0.0) -> None:
    """Raise :class:`Wrong` unless ``answer(*case)`` is ``reference(*case)`` (within ``rtol``
    or ``atol``) for every case.

    On the first case that differs the message is ``"{call(*case)} = got, expected want: "``
    followed by the hint of the first shortcut whose ``test(got, *case)`` holds, else by
    ``hint`` (the right formula and its source, or how to derive it). ``answer`` and
    ``reference`` may be handles (:mod:`labkit.check.handles`) or plain functions.
    """
    for case in cases:
        got = answer(*case)
        if isinstance(got, bool) or not isinstance(got, (int, float, np.integer, np.floating)):
            raise Wrong(f"{call(*case)} returned {got!r} ({type(got).__name__}): return a "
                        f"number.")
        got = float(got)
        want = float(reference(*case))
        if math.isclose(got, want, rel_tol=rtol, abs_tol=atol):
            continue
        what = f"{call(*case)} = {got:.6g}, expected {want:.6g}"
        raise Wrong(f"{what}: " + next((h for test, h in shortcuts if _holds(test, got, case)),
                                       hint))


def _holds(test: Callable[..., bool], got: float, case: Sequence[Any]) -> bool:
    """A shortcut's test; one that cannot be computed (a reference not shipped in a student
    release, a wrong formula that divides by zero) does not hold."""
    try:
        return bool(test(got, *case))
    except Exception:
        return False


def formula_exercise(id: str, title: str, reference: Callable[..., float],
                     cases: Sequence[Sequence[Any]], *, call: Callable[..., str],
                     shortcuts: Sequence[Shortcut] = (), hint: str, rtol: float = 1e-9,
                     atol: float = 0.0, binds: str | None = None, answers: Sequence = (),
                     draw: Callable | None = None, points: float = 1.0
                     ) -> Callable[..., None]:
    """Register exercise ``id``: the learner writes ``binds`` (default: the reference's
    name), checked by :func:`check_formula` on ``cases`` and on three fresh cases drawn
    from the check's ``rng`` (``draw(rng)``, or the known cases perturbed: see
    :func:`perturbed`). ``answers`` lists other labkit functions that compute the answer
    (refused, like the reference). The checker counts as the calling module's, e.g.
    ``labkit.check.ch12`` (the registry allows a module to re-register its own ids, and
    refuses an id that another module registered)."""
    def checker(answer, ref, rng):
        fresh = drawn_cases(cases, ref, rng, draw)
        check_formula(answer, ref, [*cases, *fresh], call=call, shortcuts=shortcuts,
                      hint=hint, rtol=rtol, atol=atol)
    checker.__module__ = sys._getframe(1).f_globals["__name__"]
    return exercise(id, title, reference=reference, binds=binds or reference.__name__,
                    answers=tuple(answers), points=points)(checker)
