"""labkit.dataload: images, decode/augment, bounds, CIFAR format, storage formats."""
import numpy as np
import pytest

from labkit.dataload import cifar, formats
from labkit.dataload.model import (EncodedImages, augment, decode, encode, make_images,
                                   steady_throughput, wait_fraction, workers_needed)


def test_encode_decode_roundtrip_and_compression():
    imgs, labels = make_images(8, size=32, seed=1)
    assert imgs.dtype == np.uint8 and imgs.shape == (8, 32, 32, 3) and labels.shape == (8,)
    for im in imgs:
        blob = encode(im)
        assert np.array_equal(decode(blob), im)
        assert len(blob) < im.nbytes          # smooth images compress
    with pytest.raises(TypeError, match="blob"):
        decode("not bytes")


def test_augment_shape_normalisation_and_determinism():
    im = make_images(1, seed=2)[0][0]
    a = augment(im, np.random.default_rng(0))
    b = augment(im, np.random.default_rng(0))
    assert a.shape == (3, 32, 32) and a.dtype == np.float32 and np.array_equal(a, b)
    # no blur, no jitter effect on a constant grey image away from the padded border
    grey = np.full((8, 8, 3), 128, np.uint8)
    out = augment(grey, np.random.default_rng(3), pad=0, blur=False)
    # contrast jitter leaves a constant image constant; brightness shifts every pixel equally
    assert np.allclose(out, out[:, :1, :1])


def test_dataset_items_are_reproducible_per_index():
    imgs, labels = make_images(6, seed=3)
    ds = EncodedImages(imgs, labels, repeat=2)
    assert len(ds) == 12
    x1, y1 = ds[7]
    x2, y2 = ds[7]
    assert np.array_equal(x1, x2) and y1 == labels[1]
    xb, yb = ds.load_batch([0, 1, 2])
    assert xb.shape == (3, 3, 32, 32) and list(yb) == list(labels[:3])
    with pytest.raises(ValueError, match="labels"):
        EncodedImages(imgs, labels[:2])


def test_wait_fraction_is_total_ratio():
    assert wait_fraction([0.9, 0.0], [0.1, 0.1]) == pytest.approx(0.9 / 1.1)
    assert wait_fraction([0, 0], [0, 0]) == 0.0
    with pytest.raises(ValueError, match="compute_s"):
        wait_fraction([0.1, 0.2], [0.1])


def test_steady_throughput_regimes():
    assert steady_throughput(0.03, 0.01, 0, 2) == pytest.approx(25.0)
    assert steady_throughput(0.03, 0.01, 1, 2) == pytest.approx(1 / 0.03)     # worker-bound
    assert steady_throughput(0.03, 0.01, 8, 2) == pytest.approx(2 / 0.04)     # core-bound
    assert steady_throughput(0.03, 0.01, 8, 64) == pytest.approx(100.0)       # step-bound
    with pytest.raises(ValueError, match="cores"):
        steady_throughput(0.03, 0.01, 1, 0)
    assert workers_needed(0.032, 0.012) == 3 and workers_needed(0.03, 0.01) == 3
    assert workers_needed(0.001, 0.01) == 1


def test_cifar_binary_roundtrip_matches_the_documented_layout(tmp_path):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    labels = np.array([3, 0, 9, 1, 7])
    p = cifar.write_cifar_bin(tmp_path / "data_batch_1.bin", imgs, labels)
    raw = p.read_bytes()
    assert len(raw) == 5 * 3073
    # record 2: label byte, then the red plane row-major, then green, then blue
    r = raw[2 * 3073:3 * 3073]
    assert r[0] == 9
    assert r[1:33] == imgs[2, 0, :, 0].tobytes()            # first row of red
    assert r[1 + 1024:1 + 1024 + 32] == imgs[2, 0, :, 1].tobytes()
    assert r[1 + 2048 + 32:1 + 2048 + 64] == imgs[2, 1, :, 2].tobytes()   # 2nd row of blue
    got_imgs, got_labels = cifar.read_cifar_bin(p)
    assert np.array_equal(got_imgs, imgs) and list(got_labels) == list(labels)
    lab, im = cifar.decode_record(r)
    assert lab == 9 and np.array_equal(im, imgs[2])
    # CIFAR-100: coarse then fine label byte
    p100 = cifar.write_cifar_bin(tmp_path / "train.bin", imgs, labels, coarse_labels=[1, 2, 3, 4, 5])
    assert p100.stat().st_size == 5 * 3074
    im100, fine = cifar.read_cifar_bin(p100, label_bytes=2)
    assert np.array_equal(im100, imgs) and list(fine) == list(labels)
    (tmp_path / "bad.bin").write_bytes(b"\0" * 3000)
    with pytest.raises(ValueError, match="records"):
        cifar.read_cifar_bin(tmp_path / "bad.bin")


def test_formats_read_back_the_same_bytes(tmp_path):
    imgs, _ = make_images(10, seed=4)
    recs = [im.tobytes() for im in imgs]
    assert list(formats.record_offsets([3, 5, 2])) == [0, 3, 8, 10]
    pf = formats.write_per_file(tmp_path, recs)
    sh = formats.write_shards(tmp_path, recs, shard_size=4)
    mm = np.load(formats.write_memmap(tmp_path, imgs), mmap_mode="r")
    reader = formats.ShardReader(sh)
    assert len(reader) == 10 and len(list(sh.glob("shard-*.bin"))) == 3
    for i in (0, 3, 4, 9):
        assert formats.read_per_file(pf, i) == recs[i] == reader[i] == mm[i].tobytes()
    res = formats.measure_formats(imgs, tmp_path / "m", reads=50, repeats=1)
    assert [r.name for r in res] == list(formats.FORMATS)
    assert res[0].files == 10 and res[2].files == 1
    assert all(r.bytes_on_disk >= imgs.nbytes for r in res)
