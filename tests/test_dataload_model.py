"""labkit.dataload.model: images that compress, the PNG codec, the dataset and its epochs,
the steady window, the bounds and the shared-machine arithmetic; CIFAR and storage formats."""
import io
import struct
import zlib

import numpy as np
import pytest

from labkit.dataload import cifar, formats
from labkit.dataload.model import (EncodedImages, EpochSampler, Machine, augment,
                                   background_load, decode, encode, make_images,
                                   others_from_share, steady_rate, steady_steps,
                                   steady_throughput, steady_window, wait_fraction,
                                   workers_needed)


def test_png_roundtrip_and_pillow_reads_it():
    Image = pytest.importorskip("PIL.Image")
    imgs, _ = make_images(8, size=32, seed=1)
    for im in imgs:
        blob = encode(im)
        assert blob[:8] == b"\x89PNG\r\n\x1a\n"
        assert np.array_equal(decode(blob), im)
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(blob))), im)   # a real PNG
    grey = imgs[0][..., 0]
    assert np.array_equal(decode(encode(grey)), grey[..., None])
    with pytest.raises(TypeError, match="blob"):
        decode("not bytes")
    with pytest.raises(TypeError, match="uint8"):
        encode(imgs[0].astype(np.float32))


def _png(rows: np.ndarray, h: int, w: int) -> bytes:
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows.tobytes()))
            + chunk(b"IEND", b""))


def test_decode_reads_none_sub_and_up_rows_and_rejects_the_rest():
    img = np.random.default_rng(0).integers(0, 256, size=(4, 3, 3), dtype=np.uint8)
    filt = img.reshape(4, 9).copy()
    filt[1] = img[1].reshape(9) - img[0].reshape(9)                 # Up: minus the row above
    filt[2, 3:] = img[2].reshape(9)[3:] - img[2].reshape(9)[:-3]    # Sub: minus bpp=3 to the left
    rows = np.concatenate([np.array([[0], [2], [1], [0]], np.uint8), filt], axis=1)
    assert np.array_equal(decode(_png(rows, 4, 3)), img)
    rows[3, 0] = 4                                                  # Paeth
    with pytest.raises(ValueError, match="Paeth"):
        decode(_png(rows, 4, 3))
    blob = bytearray(encode(img))
    blob[45] ^= 0xFF                                                # a byte of IDAT data
    with pytest.raises(ValueError, match="CRC"):
        decode(bytes(blob))
    with pytest.raises(ValueError, match="signature"):
        decode(b"GIF89a" + bytes(20))


def test_images_with_structure_compress_and_noise_takes_it_away():
    imgs, labels = make_images(64, size=32, seed=0)
    ratio = np.mean([im.nbytes / len(encode(im)) for im in imgs])
    assert ratio > 3.5                       # measured 4.9 (3.7–10.3)
    noisy, _ = make_images(64, size=32, seed=0, noise=2.0)
    assert np.mean([im.nbytes / len(encode(im)) for im in noisy]) < 2.0    # measured 1.5
    assert len(encode(imgs[0], level=9)) <= len(encode(imgs[0], level=1)) < len(encode(imgs[0], 0))
    # the label is a function of the content: same scene, same label
    again, labels2 = make_images(64, size=32, seed=0)
    assert np.array_equal(again, imgs) and np.array_equal(labels, labels2)
    assert set(labels.tolist()) <= set(range(9)) and len(set(labels.tolist())) > 3


def test_augment_shape_normalisation_and_determinism():
    im = make_images(1, seed=2)[0][0]
    a = augment(im, np.random.default_rng(0))
    b = augment(im, np.random.default_rng(0))
    assert a.shape == (3, 32, 32) and a.dtype == np.float32 and np.array_equal(a, b)
    grey = np.full((8, 8, 3), 128, np.uint8)
    out = augment(grey, np.random.default_rng(3), pad=0, blur=False)
    # contrast jitter leaves a constant image constant; brightness shifts every pixel equally
    assert np.allclose(out, out[:, :1, :1])


def test_dataset_items_depend_on_epoch_and_index_and_the_cache_changes_nothing_else():
    imgs, labels = make_images(6, seed=3)
    ds = EncodedImages(imgs, labels, repeat=2)
    cached = EncodedImages(imgs, labels, repeat=2, cache=True)
    assert len(ds) == 12
    x1, y1 = ds[7]
    assert np.array_equal(x1, ds[7][0]) and y1 == labels[1]
    assert np.array_equal(ds[(0, 7)][0], x1)                  # an int index uses ds.epoch = 0
    assert not np.array_equal(ds[(1, 7)][0], x1)              # another epoch, another crop
    ds.set_epoch(1)
    assert np.array_equal(ds[7][0], ds[(1, 7)][0])
    assert np.array_equal(cached[(1, 7)][0], ds[(1, 7)][0])   # same pixels, same seeds
    assert cached.stored_bytes == imgs.nbytes == ds.raw_bytes
    assert ds.stored_bytes < imgs.nbytes / 3                  # the PNGs, compressed
    xb, yb = ds.load_batch([0, 1, 2])
    assert xb.shape == (3, 3, 32, 32) and list(yb) == list(labels[:3])
    with pytest.raises(ValueError, match="labels"):
        EncodedImages(imgs, labels[:2])
    with pytest.raises(ValueError, match="epoch"):
        ds.set_epoch(-1)


def test_epoch_sampler_carries_the_epoch_with_each_index():
    s = EpochSampler(5, num_samples=7)
    assert len(s) == 7 and list(s) == [(0, i % 5) for i in range(7)]
    s.set_epoch(3)
    assert [e for e, _ in s] == [3] * 7
    sh = EpochSampler(6, shuffle=True, seed=1)
    first = [i for _, i in sh]
    sh.set_epoch(1)
    second = [i for _, i in sh]
    assert sorted(first) == sorted(second) == list(range(6)) and first != second
    sh.set_epoch(0)
    assert [i for _, i in sh] == first
    with pytest.raises(ValueError, match="num_samples"):
        EpochSampler(5, num_samples=0)


def test_steady_window_leaves_out_filling_and_draining():
    assert steady_window(76, 2, 3) == slice(6, 70)            # first and last 2 × 3 steps out
    assert steady_window(65, 2, 0) == slice(1, 65)            # the first step only
    assert steady_steps(2, 3) == 76 and steady_steps(2, 0) == 65 and steady_steps(4, 2, 8) == 24
    assert steady_window(steady_steps(4, 2, 8), 4, 2) == slice(8, 16)
    with pytest.raises(ValueError, match=r"steps must be >= 20 .* got 19"):
        steady_window(19, 2, 3)
    end = 0.5 + 0.01 * np.arange(1, 21)                       # a step every 10 ms
    end[:3] = [0.1, 0.2, 0.3]                                 # a slow start, outside
    assert steady_rate(end, 32, slice(4, 20)) == pytest.approx(3200.0)
    with pytest.raises(ValueError, match="window"):
        steady_rate(end, 32, slice(0, 20))


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


def test_fair_share_and_its_inverse():
    assert Machine(2, 0).share(1) == 1.0 and Machine(2, 0).share(4) == 0.5
    assert Machine(2, 2).share(1) == pytest.approx(2 / 3) and Machine(2, 0.5).share(1) == 1.0
    # others using u cores beside one process of ours: weight u (room to spare) or u/(c − u)
    assert background_load(0.4, 2) == pytest.approx(0.4)
    assert background_load(1.5, 2) == pytest.approx(3.0)
    assert background_load(1.0 + 1e-9, 2) == pytest.approx(background_load(1.0, 2))   # continuous
    us = np.linspace(0, 1.9, 40)
    bs = [background_load(u, 2) for u in us]
    assert np.all(np.diff(bs) > 0)                                                      # monotone
    for u in us:   # the inverse: our one process gets min(1, c − u)
        assert Machine(2, background_load(u, 2)).share(1) == pytest.approx(min(1.0, 2 - u))
    assert others_from_share(0.5, 2) == 1.5 and others_from_share(1.0, 2) == 0.0
    with pytest.raises(ValueError, match="others_cores"):
        background_load(2.0, 2)


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
    ratios = formats.read_cost_ratios([formats.FormatTiming("per_file", 6e-6, 10, 1),
                                       formats.FormatTiming("shards", 2e-6, 2, 1),
                                       formats.FormatTiming("memmap", 1e-6, 1, 1)])
    assert ratios == pytest.approx({"shards": 3.0, "memmap": 6.0})
    assert set(formats.read_cost_ratios(res)) == {"shards", "memmap"}
    with pytest.raises(ValueError, match="per_file"):
        formats.read_cost_ratios(res[1:])


def test_a_cache_of_decoded_pixels_gives_the_datasets_items_without_the_decode():
    from labkit.dataload.model import DecodedCache, EncodedImages, make_images

    images, labels = make_images(6, seed=2)
    ds = EncodedImages(images, labels, seed=4, repeat=2)
    cache = DecodedCache(ds)
    assert len(cache) == 12 and cache.stored_bytes == images.nbytes > ds.stored_bytes
    for index in [(0, 3), (1, 3), (2, 11), 5]:
        x, y = cache[index]
        x0, y0 = ds[index]
        assert np.array_equal(x, x0) and y == y0
    assert not np.array_equal(cache[(0, 3)][0], cache[(1, 3)][0])    # augmented afresh
    with pytest.raises(TypeError, match="EncodedImages"):
        DecodedCache(images)
