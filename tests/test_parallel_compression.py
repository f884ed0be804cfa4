"""Gradient compression and local/async SGD on digits."""
import numpy as np
import pytest

from labkit.parallel import compression as C


@pytest.fixture(scope="module")
def task():
    return C.digits_task(0)


def test_mlp_gradients_match_central_differences(task):
    params = C.init_params(8, seed=1)
    x, y = task.x_train[:20], task.y_train[:20]
    _, grads = C.loss_and_grads(params, x, y)
    rng = np.random.default_rng(0)
    for i, p in enumerate(params):
        for _ in range(3):
            j = tuple(rng.integers(0, s) for s in p.shape)
            old = p[j]
            p[j] = old + 1e-6
            up = C.loss_and_grads(params, x, y)[0]
            p[j] = old - 1e-6
            down = C.loss_and_grads(params, x, y)[0]
            p[j] = old
            assert grads[i][j] == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-7)


def test_topk_error_feedback_conserves_the_signal():
    rng = np.random.default_rng(0)
    g, m = rng.standard_normal((5, 7)), rng.standard_normal((5, 7))
    kept, new = C.topk_compress(g, m, 6)
    assert np.count_nonzero(kept) == 6
    np.testing.assert_allclose(kept + new, g + m)
    acc = np.abs(g + m).ravel()
    assert np.abs(kept[kept != 0]).min() >= np.sort(acc)[-6] - 1e-12
    with pytest.raises(ValueError, match="k must be in"):
        C.topk_compress(g, m, 36)


def test_int8_quantization_error_bound():
    x = np.random.default_rng(1).standard_normal(1000) * 3
    q, s = C.int8_quantize(x)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    assert np.max(np.abs(q * s - x)) <= s / 2 + 1e-12
    q, s = C.int8_quantize(np.array([-2.54, 0.5, 1.0]))   # scale = 2.54 / 127
    assert s == pytest.approx(0.02) and q.tolist() == [-127, 25, 50]
    q, s = C.int8_quantize(np.zeros(3))                    # nothing to scale: scale 1
    assert s == 1.0 and q.dtype == np.int8 and q.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="x must not be empty"):
        C.int8_quantize(np.zeros(0))
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="x must hold finite numbers"):
            C.int8_quantize(np.array([1.0, bad]))


def test_powersgd_recovers_low_rank_mean():
    rng = np.random.default_rng(2)
    u, v = rng.standard_normal((20, 2)), rng.standard_normal((2, 15))
    grads = [[u @ v * (w + 1)] for w in range(3)]        # rank-2 matrices, mean = 2 u v
    comp = C.PowerSGD(rank=2)
    out, nbytes = comp.aggregate(grads)
    np.testing.assert_allclose(out[0], 2 * u @ v, rtol=1e-8, atol=1e-8)
    assert nbytes == round(2 * 2 / 3 * (20 + 15) * 2 * 4)     # P and Q, ring all-reduced


def test_methods_bytes_and_accuracy(task):
    kw = dict(task=task, workers=4, steps=60, seed=0)
    full = C.train_sync(None, **kw)
    shapes = [p.shape for p in C.init_params(64)]
    n = sum(int(np.prod(s)) for s in shapes)
    assert full.bytes_per_worker == 60 * round(2 * 3 / 4 * 4 * n)     # ring all-reduce
    top = C.train_sync(C.TopK(0.01), **kw)
    # ring all-gather of each tensor's k (value, index) pairs: (p - 1) k 8 bytes per worker
    k = [max(1, round(0.01 * np.prod(s))) for s in shapes]
    assert top.bytes_per_worker == 60 * 3 * 8 * sum(k)
    assert top.collective == "ring all-gather"
    # against the ring at p = 4: 3·8k / (1.5·4n), twice the payload ratio 8k / 4n
    assert top.bytes_per_worker / full.bytes_per_worker == pytest.approx(
        2 * (8 * sum(k)) / (4 * n), rel=1e-3)
    i8 = C.train_sync(C.Int8(), **kw)
    assert i8.bytes_per_worker == 60 * 3 * sum(int(np.prod(s)) + 4 for s in shapes)
    local = C.train_local_sgd(6, **kw)
    assert local.bytes_per_worker == 10 * round(2 * 3 / 4 * 4 * n)
    asy = C.train_async(2, **kw)
    assert asy.bytes_per_worker == 60 * 4 * n          # one gradient sent per update
    for r in (full, top, i8, local, asy):
        assert r.test_accuracy > 0.7, r
    ef = C.train_sync(C.TopK(0.01), **kw)
    no_ef = C.train_sync(C.TopK(0.01, error_feedback=False), **kw)
    assert ef.losses[-1] < no_ef.losses[-1]


def test_compression_errors(task):
    with pytest.raises(ValueError, match="ratio"):
        C.TopK(0)
    with pytest.raises(ValueError, match="rank"):
        C.PowerSGD(0)
    with pytest.raises(ValueError, match="workers"):
        C.train_sync(None, task=task, workers=0)
    with pytest.raises(ValueError, match="period"):
        C.train_local_sgd(0, task=task)
    with pytest.raises(ValueError, match="staleness"):
        C.train_async(-1, task=task)
