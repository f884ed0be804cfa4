"""Small things the check framework prints: a reveal prints its line once, and hints count
in the right number."""
from labkit.check import evaluate, predict, reveal


def test_reveal_prints_once_and_returns_nothing(capsys):
    predict("t.once", 3, "a test")
    capsys.readouterr()
    assert reveal("t.once", 3) is None            # a cell's last line shows no second copy
    assert capsys.readouterr().out.count("◆ t.once") == 1
    assert reveal("t.none", 2.5) is None


def test_the_rounded_down_hint_counts_in_the_right_number():
    one = evaluate("0.1", lambda n, t: n // t).message
    assert "the last element gets no thread" in one and "1 elements" not in one
    many = evaluate("0.1", lambda n, t: n // t if n > 1000 else -(-n // t)).message
    assert "elements get no thread" in many
