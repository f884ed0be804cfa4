# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (labkit)
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown] id="cell-000"
# # 07 · Data pipelines
#
# *Deep Learning Systems: from algorithms to hardware* — chapter 07. Seeds: 000 (exercise 8: diagnose a data-loading bottleneck), 002 (data-flow optimisation: preprocessing, 数据分片与缓存 sharding and caching, overlapping computation with I/O).
#
# **Objectives.** After this chapter you can
#
# 1. write a timed training loop that measures, step by step and in a steady window, how long the model waits for data — the 数据加载瓶颈（data-loading bottleneck）— and how long it computes, in wall-clock and in CPU time;
# 2. diagnose a bottleneck by experiment (the loader alone, the step alone on one cached batch, the full pipeline), repeated in alternation with its spread — measured, not derived;
# 3. say what each `torch.utils.data.DataLoader` knob (`num_workers`, `prefetch_factor`, `pin_memory`, `persistent_workers`, `batch_size`) does and which helps on a 2-core machine;
# 4. model an input pipeline as stages sharing cores, predict its throughput with a bound and a discrete-event simulator calibrated on CPU time, and state how well the prediction holds;
# 5. weigh compression against caching, compare one file per sample, packed shards and memory-mapped arrays, and read the real CIFAR-10 binary format.
#
# **Guiding questions.** Why can adding workers make a CPU training run *slower*? Why does a GPU need more loader workers than a CPU? When does a faster file format matter, and when does it not? Why is one timing of one run not an experiment?
#
# **The lab.** You write the timed loop (7.1), the experiments (7.3), the trials (7.4), the diagnosis (7.5), a sampler that survives persistent workers (7.6), the prefetch queue (7.8) and a cache of decoded pixels (7.10). From §2 on, every DataLoader run in this chapter is timed by *your* loop and fed by *your* experiments; where a check of yours has not passed yet, labkit's version stands in and the check says so.

# %% id="cell-001"
# %matplotlib inline
import itertools, os, tempfile, time
from dataclasses import replace
import numpy as np
import matplotlib.pyplot as plt
from labkit.check import check, predict, reveal
from labkit.dataload import model, sim, plots, widgets, formats, cifar, compare, fake, measure
from labkit.dataload import measure
from labkit.dataload.measure import no_sync, run_experiment
from labkit.dataload.costs import cache_tradeoff, measure_stage_costs
from labkit.dataload.calibrate import calibrate_trials
from labkit.dataload.randomness import epoch_augmentations, worker_randomness
print("CPU cores this process may use:", len(os.sched_getaffinity(0)))

# %% [markdown] id="seed-002-dataflow"
# ## 1. A pipeline with a real cost
#
# Seed 002 names 数据预处理（data preprocessing）as the first place a data flow loses time. A vision sample on disk is an encoded image (JPEG, PNG). Before the model sees it, the CPU must **read** it, **decode** it into pixels, **augment** it (random crop, flip, colour jitter: new randomness every epoch, so it cannot be cached), convert and normalise it, and **collate** a batch; then the batch is **copied** to the accelerator and the model **computes**.
#
# We draw 256 synthetic 32×32 scenes with structure (a shaded background and a few rectangles and ellipses, `labkit.dataload.model.make_images`) and store each as a real PNG file (`model.encode`: the PNG specification's signature, IHDR, one zlib-deflated IDAT of Sub-filtered scanlines, IEND — Pillow opens them). Because the scenes have structure they compress, as drawings do; sensor noise makes every pixel unpredictable, as in photographs, and the gain shrinks. The dataset decodes and augments each item in numpy (`model.augment`: pad-and-crop, flip, brightness/contrast jitter, a 3×3 blur, float32 CHW normalisation). It is a plain object with `__len__` and `__getitem__`, all a map-style `DataLoader` needs. The costs below are CPU time of one thread (`time.thread_time`), so another process taking turns on the core does not inflate them.

# %% id="cell-003"
images, labels = model.make_images(256, seed=0)
ds = model.EncodedImages(images, labels, seed=0)
noisy = model.EncodedImages(*model.make_images(256, seed=0, noise=2.0), seed=0)
print(f"{len(ds)} PNG images: {ds.stored_bytes:,} B stored for {ds.raw_bytes:,} B of pixels, "
      f"{ds.raw_bytes / ds.stored_bytes:.1f}× smaller; with sensor noise (σ = 2 grey levels) "
      f"{noisy.raw_bytes / noisy.stored_bytes:.1f}×")
costs = measure_stage_costs(ds, batch_size=32, repeats=3)
print(compare.format_stage_costs(costs, 32))


# %% [markdown] id="cell-004"
# ## 2. The timed loop
#
# How long does the model wait for data? Time it, step by step. A training loop alternates two parts: **wait** — `x, y = next(batches)` blocks until a batch is there — and **compute** — `step(x, y)`. Four things make the timing honest:
#
# * **Warm-up.** The first steps are not the steady state: the worker processes start, and the prefetch queue fills (the batches built during the start-up arrive back to back). Take `warmup` steps untimed — `max(1, prefetch_factor × num_workers)` in this chapter — then time a **window** of `window` steps (64 here).
# * **Per step, two parts.** Read the clock before `next()`, after it, and after the step. Timing the whole epoch and dividing gives an average and hides *where* the time goes.
# * **Sync.** On a GPU a step's CUDA calls return before the work ends; `torch.cuda.synchronize()` ("Wait for all kernels in all streams on a CUDA device to complete", `torch/cuda/__init__.py`) must run before the clock is read, or the step's time lands in the next wait — or nowhere, after the last step. The loop takes a `sync` function (`no_sync` on the CPU).
# * **Two clocks.** `clock` (`time.perf_counter`) is wall-clock time. `cpu_clock` (`time.thread_time`) counts only what this thread ran: a thread blocked on the workers' queue uses none, and when other processes take turns on the core the wall clock runs on without us. The model of §5 is calibrated on CPU time.
#
# The steady rate is `batch_size × window / (t_end − t_begin)`: `t_begin` read when the warm-up's last step has ended, `t_end` when the window's last step has (after its `sync()`).
#
# ### Lab 7.1 — the timed loop
#
# Write `timed_loop`. It returns a dict: `wait_s`, `compute_s`, `wait_cpu_s`, `step_cpu_s` (numpy arrays, one value per timed step) and `samples_per_s`. The check runs it on a machine in virtual time (`labkit.dataload.fake`): a fake loader, a fake step and clocks whose costs are known exactly, so your numbers must match to rounding, whatever the load on this machine.

# %% id="lab-timed-loop"
def timed_loop(batches, step, *, batch_size, warmup, window,
               clock=time.perf_counter, cpu_clock=time.thread_time, sync=no_sync):
    """Take `warmup` batches from `batches` and run `step(x, y)` on each, untimed; then time
    `window` more, each split into the wait in next() and the step up to sync(), on `clock`
    and on `cpu_clock`. Returns {"wait_s", "compute_s", "wait_cpu_s", "step_cpu_s": arrays of
    length `window`, "samples_per_s": batch_size × window / (t_end − t_begin)}."""
    ### BEGIN SOLUTION
    it = iter(batches)
    for _ in range(warmup):                     # untimed: the workers start, the queue fills
        x, y = next(it)
        step(x, y)
        sync()
    wait, compute = np.zeros(window), np.zeros(window)
    wait_cpu, step_cpu = np.zeros(window), np.zeros(window)
    begin = clock()
    for k in range(window):
        t0, c0 = clock(), cpu_clock()
        x, y = next(it)
        t1, c1 = clock(), cpu_clock()
        step(x, y)
        sync()                                  # the step's work has ended
        t2, c2 = clock(), cpu_clock()
        wait[k], compute[k] = t1 - t0, t2 - t1
        wait_cpu[k], step_cpu[k] = c1 - c0, c2 - c1
    end = clock()
    return {"wait_s": wait, "compute_s": compute, "wait_cpu_s": wait_cpu,
            "step_cpu_s": step_cpu, "samples_per_s": batch_size * window / (end - begin)}
    ### END SOLUTION


# %% id="try-timed-loop"
# A first try, by hand: every batch takes 10 ms to load, every step 1 ms on the CPU plus 4 ms
# on an (imaginary) accelerator. Each ✓ is a number your loop measured exactly.
fake.try_loop(timed_loop);

# %% labkit={"exercise": "7.1"} tags=["check"]
check("7.1", timed_loop)

# %% [markdown] id="loop-real"
# Your loop now times real runs. `run_experiment(ds, …, loop=timed_loop)` builds a real `DataLoader` over the dataset and an SGD step of a two-layer MLP on the flattened 3×32×32 images (one thread), and hands both to your loop. With `num_workers=0` the training process loads every batch itself, between steps.
#
# **Predict** first: what share of the loop's time will be spent waiting for data with `num_workers=0`? (Use the stage costs printed in §1.)

# %% id="cell-005"
### BEGIN SOLUTION
guess = 0.7
### END SOLUTION
predict("7.wait0", guess, "share of time waiting for data, num_workers=0")

# %% id="cell-006"
run0 = run_experiment(ds, num_workers=0, loop=timed_loop)
print(compare.format_run(run0))
reveal("7.wait0", round(run0.wait_fraction, 2))


# %% [markdown] id="cell-007"
# ### Lab 7.2 — the waiting share
#
# Write `wait_fraction(wait_s, compute_s)`: given per-step arrays of waiting and compute seconds, return the share of the loop's time spent waiting. (A profiler shows the same thing as the gap between steps; PyTorch's profiler names it `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`.)

# %% id="cell-008"
def wait_fraction(wait_s, compute_s):
    ### BEGIN SOLUTION
    w, c = np.sum(wait_s), np.sum(compute_s)
    return float(w / (w + c)) if w + c > 0 else 0.0
    ### END SOLUTION


# %% labkit={"exercise": "7.2"} tags=["check"]
check("7.2", wait_fraction)

# %% id="wait-share-yours"
print(f"waiting share of the num_workers=0 run, from your loop's arrays: "
      f"{wait_fraction(run0.wait_s, run0.compute_s):.1%}")


# %% [markdown] id="experiments"
# ## 3. Is it the data? Exercise 8's experiments
#
# A waiting share says the loop waits; it does not say what to fix. Seed exercise 8 asks for an experiment that diagnoses the bottleneck. Three runs of the same loop answer it, each **measured**, none derived from another:
#
# * **the loader alone** — iterate the DataLoader with a step that does nothing: the rate loading delivers;
# * **the step alone** — take one batch, once, and train on it again and again: the rate the step allows with no loading at all;
# * **the full pipeline** — both, as in training.
#
# If the pipeline runs at the slower one's rate alone, that one is the bottleneck. If it runs well below both, they slow each other down — on a CPU they share the cores.
#
# ### Lab 7.3 — what each experiment feeds the loop
#
# Write `experiment(kind, batches, step)` for `kind` in `"pipeline"`, `"loader alone"`, `"compute alone"`: return the pair `(batches, step)` to give the timed loop. The check hands it a fake loader and a fake step and watches what the loop then does with them.

# %% id="lab-experiment"
def experiment(kind, batches, step):
    """(batches, step) for the timed loop: unchanged for "pipeline"; the batches and a step that
    does nothing for "loader alone"; one batch taken once and repeated for ever, and the step,
    for "compute alone"."""
    ### BEGIN SOLUTION
    if kind == "loader alone":
        return batches, lambda x, y: None
    if kind == "compute alone":
        cached = next(iter(batches))            # loaded once, before the clock starts
        return itertools.repeat(cached), step
    if kind == "pipeline":
        return batches, step
    raise ValueError(f"kind must be 'pipeline', 'loader alone' or 'compute alone', got {kind!r}")
    ### END SOLUTION


# %% labkit={"exercise": "7.3"} tags=["check"]
check("7.3", experiment)


# %% [markdown] id="lab-trials-md"
# ### Lab 7.4 — trials in alternation
#
# One run is one sample of a machine whose load changes from second to second (this one is shared with other jobs). Run each experiment several times and report the median and the range. Run them **in alternation** — A B C A B C, not A A B B C C — so a neighbour's job that starts halfway slows every setting alike instead of one.
#
# Write `interleave(experiments, trials)`: `experiments` maps names to functions of no arguments (each runs one trial); return `{name: [its results, in the order they ran]}`.

# %% id="lab-interleave"
def interleave(experiments, trials):
    ### BEGIN SOLUTION
    results = {name: [] for name in experiments}
    for _ in range(trials):
        for name, run in experiments.items():
            results[name].append(run())
    return results
    ### END SOLUTION


# %% labkit={"exercise": "7.4"} tags=["check"]
check("7.4", interleave)


# %% [markdown] id="lab-diagnose-md"
# ### Lab 7.5 — the diagnosis
#
# Write `diagnose(loader, compute, pipeline, threshold=0.9)`: each argument is a timed loop's result (the dict your `timed_loop` returns) for the loader alone, the step alone and the full pipeline. Return `"data"` when the loader alone is the slower of the two and the pipeline reaches `threshold` × its rate, `"compute"` when the step alone is the slower and the pipeline reaches `threshold` × its rate, and `"both"` when the pipeline stays below `threshold` × the slower one's rate. The check draws synthetic runs — among them pipelines that wait a lot without being data-bound, and data-bound ones that wait little.

# %% id="lab-diagnose"
def diagnose(loader, compute, pipeline, threshold=0.9):
    ### BEGIN SOLUTION
    r_load, r_step = loader["samples_per_s"], compute["samples_per_s"]
    slower, name = (r_load, "data") if r_load <= r_step else (r_step, "compute")
    return name if pipeline["samples_per_s"] >= threshold * slower else "both"
    ### END SOLUTION


# %% labkit={"exercise": "7.5"} tags=["check"]
check("7.5", diagnose)

# %% [markdown] id="experiments-run"
# Now the experiments, on the real DataLoader with one worker, three trials in alternation: your `experiment` feeds your `timed_loop`, your `interleave` orders the runs, and your `diagnose` reads each trial. (`mine` collects your functions; every run from here on takes them.)
#
# **Predict**: on this 2-core machine with one worker, which will it be — data, compute or both?

# %% id="experiments-predict"
### BEGIN SOLUTION
guess = "data"
### END SOLUTION
predict("7.verdict", guess, "the bottleneck with one worker", choices=("data", "compute", "both"))

# %% id="experiments-measure"
mine = dict(loop=timed_loop, experiment=experiment)
exps = measure.interleaved_trials(ds, {"loader alone": dict(kind="loader alone", num_workers=1),
                               "compute alone": dict(kind="compute alone"),
                               "pipeline": dict(num_workers=1)},
                          trials=3, interleave=interleave, **mine)
print(compare.format_trials(exps))
verdicts = compare.verdicts_by_trial(diagnose, exps["loader alone"], exps["compute alone"],
                                     exps["pipeline"])
print("your diagnosis, trial by trial:", verdicts)
reveal("7.verdict", compare.majority(verdicts))

# %% [markdown] id="loader-knobs"
# ## 4. The DataLoader's knobs, measured
#
# With `num_workers=W > 0` the `DataLoader` forks `W` worker processes; each builds whole batches (it calls `__getitem__` for each index, then collates) and sends them back through shared memory; batches come back in order. The knobs (the `DataLoader` docstring, `torch/utils/data/dataloader.py`):
#
# * `num_workers` — processes loading in parallel with the training step. Each worker runs torch with one intra-op thread (`torch.set_num_threads(1)` in `_worker_loop`, `torch/utils/data/_utils/worker.py`).
# * `prefetch_factor` — "Number of batches loaded in advance by each worker" (default 2 when `num_workers > 0`): at most `prefetch_factor × num_workers` indices are out at once (`_try_put_index`). It absorbs jitter; it cannot raise the steady rate.
# * `pin_memory` — "copy Tensors into device/CUDA pinned memory before returning them", so the host→GPU copy can be asynchronous (`.to(device, non_blocking=True)`). Without an accelerator torch warns "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used": on this machine it does nothing, so we do not time it.
# * `persistent_workers` — "the data loader will not shut down the worker processes after a dataset has been consumed once. This allows to maintain the workers `Dataset` instances alive."
# * `batch_size` — fewer, bigger batches amortise per-batch costs (IPC, collation, Python overhead of a step).
#
# **Predict**: this machine has the cores printed at the top. With 3 workers, how many times faster than `num_workers=0` will the loop be?

# %% id="cell-011"
### BEGIN SOLUTION
guess = 1.5
### END SOLUTION
predict("7.speedup3", guess, "speed-up of num_workers=3 over num_workers=0")

# %% id="cell-012"
knobs = measure.interleaved_trials(ds, {"num_workers=0": dict(num_workers=0),
                                "num_workers=2": dict(num_workers=2),
                                "num_workers=3": dict(num_workers=3),
                                "num_workers=2, prefetch_factor=4": dict(num_workers=2, prefetch_factor=4)},
                           trials=3, interleave=interleave, **mine)
print(compare.format_trials(knobs))
sweep = {0: knobs["num_workers=0"], 1: exps["pipeline"], 2: knobs["num_workers=2"],
         3: knobs["num_workers=3"]}
reveal("7.speedup3", round(sweep[3].rate.median / sweep[0].rate.median, 2))


# %% [markdown] id="epoch-md"
# ### Persistent workers and the epoch
#
# A persistent worker keeps the copy of the dataset it got when it started. Our dataset seeds each item's augmentation by `(seed, epoch, i)`, so a new epoch gives new crops — if the worker knows the epoch. Setting `dataset.set_epoch(e)` in the training process changes the training process's copy only; with persistent workers every epoch would repeat epoch 0's crops. The epoch must travel *with the indices*, which the training process sends to the workers — as `DistributedSampler.set_epoch` makes a shuffle change from epoch to epoch (`torch/utils/data/distributed.py`).
#
# ### Lab 7.6 — a sampler that carries the epoch
#
# Write `EpochIndices(n, num_samples=None)`: a sampler (`__iter__`, `__len__`) that yields `num_samples` (default `n`) indices `(epoch, k mod n)` for `k = 0, 1, …` in order, the epoch being the last `set_epoch(epoch)` (0 before any). The check runs it with a persistent worker's copy of a dataset.

# %% id="lab-sampler"
class EpochIndices:
    def __init__(self, n, num_samples=None):
        ### BEGIN SOLUTION
        self.n = n
        self.num_samples = n if num_samples is None else num_samples
        self.epoch = 0
        ### END SOLUTION

    def set_epoch(self, epoch):
        ### BEGIN SOLUTION
        self.epoch = epoch
        ### END SOLUTION

    def __len__(self):
        ### BEGIN SOLUTION
        return self.num_samples
        ### END SOLUTION

    def __iter__(self):
        ### BEGIN SOLUTION
        return iter([(self.epoch, k % self.n) for k in range(self.num_samples)])
        ### END SOLUTION


# %% labkit={"exercise": "7.6"} tags=["check"]
check("7.6", EpochIndices)

# %% id="cell-013"
mine = dict(loop=timed_loop, experiment=experiment, sampler=EpochIndices)
starts = measure.interleaved_trials(ds, {"fresh workers every epoch": dict(num_workers=2, epochs=2, window=4),
                                 "persistent workers": dict(num_workers=2, epochs=2, window=4,
                                                            persistent_workers=True)},
                            trials=3, interleave=interleave, **mine)
print(compare.format_trials(starts, first_batch=True))
kept = epoch_augmentations(ds, persistent_workers=True, sampler=EpochIndices)
stale = epoch_augmentations(ds, persistent_workers=True, epoch_sampler=False)
print(f"persistent workers, epoch 2 repeats epoch 1's crops: with your sampler "
      f"{compare.same_across_epochs(kept)}; with the epoch set in the training process only "
      f"{compare.same_across_epochs(stale)}")


# %% [markdown] id="cell-014"
# What you should see (the numbers move with the load on this shared machine; read the ranges):
#
# * **Workers help up to the core count, then stop.** The step and the loading are both CPU work. With 2 cores, at most 2 of {training process, workers} run at once, so the best case is (load + step) / 2 per batch, whatever `num_workers` is. Extra workers only add context switches and memory (torch warns when `num_workers` exceeds the cores it can see: "Our suggested max number of worker in current system is …"). On a machine shared with other jobs more workers may still seem to help: more processes get more turns from the scheduler, at the other users' expense — or hurt, when each batch then costs more CPU (§5 prints both factors).
# * **`prefetch_factor=4` against 2**: compare the two ranges printed above; where they overlap, the measurement cannot tell them apart. A queue cannot make the producer faster; it absorbs variation, and how much that buys the simulator shows in §5.
# * **A bigger batch** amortises what is paid per batch — the collation (§1), the hand-over from a worker, the Python overhead of a step — and leaves the per-sample decode and augment as they are; we do not time it here, to keep this notebook within its minute; exercise 4 of §10 measures it.
# * **Persistent workers** skip the start-up of new worker processes (fork, and re-creating each worker's state) at every epoch: compare the first batch of epoch 2 above — a fixed cost per epoch, large for short epochs and for datasets that are expensive to construct. They need the epoch to travel with the indices, or the augmentation stops changing.
#
# ## 5. A model of the pipeline
#
# Call $L$ the CPU time to load one batch, $C$ the training step, $W$ the workers and $c$ the cores. Without workers the loop alternates: $1/(L + C)$ batches per second. With workers three resources can be the bottleneck (瓶颈): the training process ($C$ per batch), the workers ($L/W$ per batch), and the cores, which all CPU work shares ($(L + C)/c$ per batch). The throughput is set by the slowest one — the pipeline bottleneck law.
#
# ### Lab 7.7 — the bound
#
# Write `steady_throughput(load_s, compute_s, workers, cores)` in batches per second, for a step that runs on the CPU.

# %% id="cell-015"
def steady_throughput(load_s, compute_s, workers, cores):
    ### BEGIN SOLUTION
    L, C = load_s, compute_s
    if workers == 0:
        return 1.0 / (L + C)
    return 1.0 / max(C, L / workers, (L + C) / cores)
    ### END SOLUTION


# %% labkit={"exercise": "7.7"} tags=["check"]
check("7.7", steady_throughput)

# %% [markdown] id="cell-017"
# A bound ignores queues, the order in which batches return, start-up and the way the OS shares cores. `labkit.dataload.sim` is a 离散事件模拟器（discrete-event simulator）that includes them: workers take batch indices round-robin, at most `prefetch_factor × W` are out, each sample's decode + augment needs a core from a pool of $c$ shared with the machine's other processes under a fair scheduler (Linux's time slice, `kernel/sched/fair.c`), the hand-over through shared memory, the copy and the step follow.
#
# We **calibrate** it on CPU time, trial by trial (`calibrate_trials`): from each `num_workers=0` trial, $L$ is your loop's mean `wait_cpu_s` — the whole loading of a batch — and $C$ its mean `step_cpu_s`; from the loader-alone trial, what handing a batch over costs a worker and taking it costs the training process; the other processes' load comes from `/proc/stat` during the run. The first line below says what $L$ is made of, from the stage costs of §1. Then the calibrated simulator **predicts** the other worker counts, each with the spread of its calibrations.

# %% id="cell-018"
print(compare.format_load_breakdown(compare.load_breakdown(sweep[0][0], costs)))
configs = calibrate_trials(sweep, costs, loaders=exps["loader alone"], batches=60)
cfg = configs[0]
print(f"calibrated (trial 1): L = {cfg.load_cpu_s*1e3:.1f} ms/batch, C = {cfg.compute_s*1e3:.1f} ms, "
      f"cores = {cfg.cores}, other processes' weight {cfg.background:.2f}")
agreement = compare.compare_trials(sweep, configs)
print(compare.format_agreement(agreement))
fig = plots.plot_agreement(agreement, title="DataLoader on this machine: measured vs calibrated model")
plt.show(); plt.close(fig)
print(compare.format_cpu_breakdown(compare.cpu_breakdown(sweep)))

# %% [markdown] id="cell-019"
# **The margin.** The `num_workers=0` row agrees by construction: it is the calibration. For the others, `measured/predicted` with its range, and whether the measured and the predicted ranges overlap, *is* the margin of this model on this machine today; read it off the table rather than from this text. The last table splits each measured rate into its two factors — the cores our processes got and the CPU a batch cost them (rate = batch size × cores ÷ CPU per batch) — so when a prediction misses you can see which factor moved: on this shared VM the CPU per batch rises with more workers (the step gets slower when it shares caches and cores with workers, and every fresh batch arrives through new shared-memory pages), which the model does not capture, and the cores we get depend on what the other users run at that moment. Repeat the measurements when the machine is quiet and compare.
#
# Move the simulator's `num_workers` below and watch the training loop's timeline: red is waiting for data. **Predict** first: with the calibrated costs and 2 workers, what share of the time will the loop wait?

# %% id="cell-020"
### BEGIN SOLUTION
guess = 0.3
### END SOLUTION
predict("7.wait2", guess, "simulated waiting share with num_workers=2")

# %% id="cell-021" tags=["browser-test"]
widgets.steps_widget(replace(cfg, batches=40, num_workers=0))

# %% id="cell-022"
reveal("7.wait2", round(sim.simulate(sim.steady_config(cfg, 2)).wait_fraction, 2))


# %% [markdown] id="queue-md"
# ### What the bound cannot show: the prefetch queue
#
# The bound is the same for every `prefetch_factor`. A queue is not: it holds the batches built ahead, and when per-batch costs vary (real images differ in size and content) a short queue runs dry at a slow batch and the step waits, even though loading keeps up *on average*. The queue follows the DataLoader's rules exactly as a recurrence over the batches — with the step on an accelerator and a core per worker, so that nothing else shares the cores:
#
# * at most $D$ = `prefetch_factor` × $W$ indices are out: index $k$ goes out at time 0 for $k < D$, otherwise when batch $k - D$ is **taken** by the loop (`_try_put_index`, called each time a batch is returned, `torch/utils/data/dataloader.py`);
# * worker $k mod W$ (round robin) builds batch $k$ once it has the index and has finished its previous batch: $	ext{ready}_k = \max(	ext{issued}_k, 	ext{free}_w) + L_k$;
# * the loop takes batch $k$ when it is ready and step $k-1$ has ended: $	ext{take}_k = \max(	ext{end}_{k-1}, 	ext{ready}_k)$, waits $	ext{take}_k - 	ext{end}_{k-1}$, and ends step $k$ at $	ext{end}_k = 	ext{take}_k + C_k$ ($	ext{end}_{-1} = 0$).
#
# ### Lab 7.8 — the prefetch queue
#
# Write `prefetch_pipeline(load_s, compute_s, workers, prefetch_factor)`: per-batch arrays of load and step seconds → the pair `(wait_s, end_s)`, one value per batch.

# %% id="lab-queue"
def prefetch_pipeline(load_s, compute_s, workers, prefetch_factor):
    ### BEGIN SOLUTION
    n, depth = len(load_s), prefetch_factor * workers
    free = np.zeros(workers)                    # when each worker has built its last batch
    take, wait, end = np.zeros(n), np.zeros(n), np.zeros(n)
    last = 0.0                                  # when the previous step ended
    for k in range(n):
        issued = take[k - depth] if k >= depth else 0.0
        w = k % workers
        free[w] = max(issued, free[w]) + load_s[k]
        take[k] = max(last, free[w])
        wait[k] = take[k] - last
        end[k] = last = take[k] + compute_s[k]
    return wait, end
    ### END SOLUTION


# %% labkit={"exercise": "7.8"} tags=["check"]
check("7.8", prefetch_pipeline)

# %% [markdown] id="queue-predict-md"
# Now a balanced pipeline — two workers each taking $L$ per batch, a step of $L/2$, the per-sample costs of §5's calibration varying with a coefficient of variation of 1 (`sim.jittered_costs`) — through your recurrence at `prefetch_factor` 1, 2 and 4, beside the event simulator (which also schedules the cores) on the same kind of costs. **Predict**: what fraction of the bound will `prefetch_factor=1` reach?

# %% id="queue-predict"
### BEGIN SOLUTION
guess = 0.9
### END SOLUTION
predict("7.prefetch1", guess, "rate / bound at prefetch_factor=1, balanced, costs that vary")

# %% id="queue-rows"
balanced = sim.PipelineConfig(batch_size=32, cores=4, decode_s=cfg.decode_s, augment_s=cfg.augment_s,
                              collate_s=cfg.collate_s, compute_s=cfg.load_cpu_s / 2,
                              compute_on_cpu=False, batches=60)
load, step = sim.jittered_costs(balanced, batches=400, jitter=1.0)
queue = compare.recurrence_rows(prefetch_pipeline, load, step, workers=2, factors=(1, 2, 4))
print("your recurrence, costs that vary:  ", compare.format_prefetch(queue))
print("the simulator, costs that vary:    ",
      compare.format_prefetch(compare.prefetch_rows(balanced, workers=2, jitter=1.0)))
print("your recurrence, constant costs:   ", compare.format_prefetch(compare.recurrence_rows(
    prefetch_pipeline, np.full(400, load.mean()), step, workers=2)))
reveal("7.prefetch1", round(queue[0].of_bound, 2))
fig = plots.plot_queue(sim.simulate(sim.steady_config(replace(balanced, prefetch_factor=1, jitter=1.0), 2)))
plt.show(); plt.close(fig)

# %% [markdown] id="queue-widget-md"
# The plot shows the simulator's queue over time (top: batches ready and waiting, batches being built) and each step's duration (bottom, the steady window shaded): the start-up before the first batch, the queue filling, and the steps that wait when it runs dry. Move `prefetch_factor` and the jitter below and watch the queue and the rate against the bound.

# %% id="queue-widget"
widgets.queue_widget(replace(balanced, num_workers=2, jitter=1.0))

# %% [markdown] id="cell-023"
# ### A bigger machine
#
# Now predict a machine we do not have: 32 cores and the step on an accelerator (it no longer takes a core), say 4 ms per batch. Loading a batch still costs the $L$ measured here per worker. **Predict** the number of workers beyond which the throughput stops growing.

# %% id="cell-024"
### BEGIN SOLUTION
guess = 8
### END SOLUTION
predict("7.bigworkers", guess, "workers needed to keep a 4 ms/step accelerator busy")

# %% id="cell-025"
big = sim.PipelineConfig(batch_size=32, cores=32, decode_s=cfg.decode_s, augment_s=cfg.augment_s,
                         compute_s=0.004, compute_on_cpu=False, batches=60)
widgets.machine_widget(big, max_workers=32)


# %% [markdown] id="cell-026"
# ### Lab 7.9 — how many workers?
#
# With the step on an accelerator and cores to spare, $W$ workers deliver $W/L$ batches per second and the accelerator consumes $1/C$. Write `workers_needed(load_s, compute_s)`: the fewest workers that keep the accelerator busy (at least one).

# %% id="cell-027"
def workers_needed(load_s, compute_s):
    ### BEGIN SOLUTION
    import math
    return max(1, math.ceil(load_s / compute_s - 1e-12))
    ### END SOLUTION


# %% labkit={"exercise": "7.9"} tags=["check"]
check("7.9", workers_needed)

# %% id="cell-029"
knee = sim.workers_to_plateau(big, max_workers=32, fraction=0.97)
print(f"L = {big.load_cpu_s*1e3:.1f} ms, C = 4 ms: workers_needed = {workers_needed(big.load_cpu_s, 0.004)}; "
      f"the simulated curve reaches 97 % of its plateau at {knee} workers")
reveal("7.bigworkers", workers_needed(big.load_cpu_s, 0.004))


# %% [markdown] id="formats-caching"
# This is why GPU servers pair each accelerator with several CPU cores, and why slow Python augmentation is moved to the GPU (NVIDIA DALI) or done once offline: a faster accelerator shrinks $C$, and the workers needed grow as $L/C$.
#
# ## 6. Formats and caching
#
# Seed 002's second preprocessing strategy is 数据分片与缓存（sharding and caching）. Three layouts of the same 256 raw 3 KB records, written to a temporary directory and read back in random order (`labkit.dataload.formats`):
#
# * one file per sample — an `open`/`read`/`close` per sample;
# * packed shards with an offset index (TFRecord, WebDataset tar shards, the CIFAR binaries) — kept open, a slice per sample;
# * one `np.memmap`'d array — a slice, the page cache does the I/O.
#
# Then the trade-off of seed 002's compression against caching, on our PNGs: the bytes each stored sample takes and the CPU time to produce an augmented sample from it, at three zlib levels and from a cache of decoded pixels — yours.
#
# ### Lab 7.10 — a cache of decoded pixels
#
# Write `DecodedCache(dataset)` for an `EncodedImages` dataset: decode every image once, when the cache is built (`dataset.image(j)` decodes image `j`, for `j < len(dataset.blobs)`); `stored_bytes` is the bytes of the decoded pixels it holds; item `index` — a pair `(epoch, i)`, or a plain `i` meaning `(dataset.epoch, i)` — is augmented afresh from the cached pixels of image `i % len(dataset.blobs)` exactly as the dataset does it: `rng = np.random.default_rng((dataset.seed, epoch, i))`, `model.augment(pixels, rng, blur=dataset.blur)`, with label `dataset.labels[i % len(dataset.blobs)]`. So it returns the dataset's items, without the decode.

# %% id="lab-cache"
class DecodedCache:
    def __init__(self, dataset):
        ### BEGIN SOLUTION
        self.dataset = dataset
        self.images = [dataset.image(j) for j in range(len(dataset.blobs))]   # decoded once
        ### END SOLUTION

    def __len__(self):
        ### BEGIN SOLUTION
        return len(self.dataset)
        ### END SOLUTION

    @property
    def stored_bytes(self):
        ### BEGIN SOLUTION
        return sum(im.nbytes for im in self.images)
        ### END SOLUTION

    def __getitem__(self, index):
        ### BEGIN SOLUTION
        d = self.dataset
        epoch, i = index if isinstance(index, tuple) else (d.epoch, index)
        j = i % len(self.images)
        rng = np.random.default_rng((d.seed, epoch, i))
        return model.augment(self.images[j], rng, blur=d.blur), d.labels[j]
        ### END SOLUTION


# %% labkit={"exercise": "7.10"} tags=["check"]
check("7.10", DecodedCache)

# %% id="cell-031"
with tempfile.TemporaryDirectory() as tmp:
    timings = formats.measure_formats(images, tmp, reads=1000)
for t in timings:
    print(f"{t.name:9s} {t.seconds_per_sample*1e6:7.1f} µs/sample  {t.files:4d} files  {t.bytes_on_disk:,} bytes")
ratios = formats.read_cost_ratios(timings)
print("a per-file read costs " + ", ".join(f"{v:.1f}× a {k} read" for k, v in ratios.items()))
fig = plots.plot_formats(timings); plt.show(); plt.close(fig)
print(compare.format_cache_tradeoff(cache_tradeoff(images, labels, samples=64, repeats=3,
                                                    cache=DecodedCache)))


# %% [markdown] id="cell-032"
# Even with everything in the page cache, a per-file read costs the multiple printed above of a slice of a shard or a memory map: the system calls and path lookups dominate a 3 KB read. On a network file system or an object store every file is a request with milliseconds of latency, and the gap becomes orders of magnitude. But compare with the decode and augment times of §1: **when the CPU work is the bottleneck, a faster format does not help**.
#
# The cache table is seed 002's trade-off in numbers: PNG keeps each sample several times smaller than its pixels (harder zlib levels a little smaller still), and pays the decode on every epoch; a cache of decoded pixels holds the full size and skips the decode. Caching helps only what is deterministic: decoded pixels can be cached (in memory or as a uint8 memmap), random augmentations cannot — so the cache saves the decode's share of the CPU work, and the augmentation stays.
#
# ### The CIFAR-10 binary format
#
# The CIFAR-10 page (Krizhevsky, https://www.cs.toronto.edu/~kriz/cifar.html, "Binary version") specifies each file as records `<1 x label><3072 x pixel>`: the label byte (0–9), then 1024 bytes of red, 1024 of green and 1024 of blue, each channel 32×32 in row-major order (the first 32 bytes are the red values of the first row). Each file holds 10,000 records: 30,730,000 bytes. CIFAR-100 records have two label bytes (coarse, then fine).
#
# ### Lab 7.11 — decode one record
#
# Write `decode_record(record)`: bytes of one record → `(label, image)` with `image` a uint8 array of shape (32, 32, 3) (height, width, channel).

# %% id="cell-033"
def decode_record(record):
    ### BEGIN SOLUTION
    a = np.frombuffer(record, dtype=np.uint8)
    return int(a[0]), a[1:].reshape(3, 32, 32).transpose(1, 2, 0)
    ### END SOLUTION


# %% labkit={"exercise": "7.11"} tags=["check"]
check("7.11", decode_record)

# %% id="cell-035"
rng = np.random.default_rng(1)
small = rng.integers(0, 256, size=(4, 32, 32, 3), dtype=np.uint8)
with tempfile.TemporaryDirectory() as tmp:
    path = cifar.write_cifar_bin(os.path.join(tmp, "data_batch_1.bin"), small, [3, 1, 4, 1])
    raw = open(path, "rb").read()
    imgs, labs = cifar.read_cifar_bin(path)
print(len(raw), "bytes = 4 ×", len(raw) // 4, "| labels", labs.tolist(),
      "| your decoder agrees:", all(np.array_equal(decode_record(raw[i*3073:(i+1)*3073])[1], small[i]) for i in range(4)))

# %% [markdown] id="cell-036"
# ## 7. The programmer's view: pitfalls
#
# * **Measure the wait before tuning anything** — in a steady window, per step, synced. If the waiting share is small, the loader is not your problem.
# * **One run is not a measurement** on a shared machine: repeat in alternation and read the ranges.
# * **`num_workers` above the free cores** adds memory (each worker holds a copy of the dataset object; with fork, pages are shared until written — Python's reference counts write to them) and context switches, not speed.
# * **Per-epoch worker start-up** costs seconds with a big dataset object or slow imports (with the `spawn` start method every worker re-imports torch); use `persistent_workers=True` — and carry the epoch with the indices.
# * **Random streams in workers.** Each worker seeds Python's `random`, torch and numpy's global RNG from the loader's base seed and its id (`_worker_loop`, `torch/utils/data/_utils/worker.py`; numpy since PyTorch 1.9), so those differ between workers. What repeats is a `numpy.random.Generator` stored on the dataset: every worker gets a copy in the same state and draws the same numbers — and, without persistent workers, again every epoch from the unchanged copy in the training process. Seed per item, as here (`(seed, epoch, i)`), or per worker in `worker_init_fn`. The table below is measured on a real DataLoader with two workers.
# * **`pin_memory=True` without `non_blocking=True`** gains little: the copy still blocks.
# * **Millions of tiny files** on a network file system: pack them into shards.
# * **Timing GPU steps without synchronising** attributes the wait to the wrong place (CUDA calls return before the work ends).

# %% id="randomness"
print(compare.format_randomness(worker_randomness()))

# %% [markdown] id="seed-ex8-intro"
# ## 8. Seed exercise 8 — diagnose a data-loading bottleneck

# %% [markdown] id="seed-ex8"
# *Design an experiment to diagnose a data-loading bottleneck in model training. List the metrics you need to measure and the analysis method.* (设计一个实验来诊断模型训练中的数据加载瓶颈。列出你需要测量的指标和分析方法。)

# %% [markdown] id="cell-038"
# ### BEGIN SOLUTION
# **Answer (worked on this chapter's measurements).**
#
# *Metrics, per training step, in a steady window (warm-up skipped):* time blocked in `next(loader_iter)` (the wait), time of the step itself (after `torch.cuda.synchronize()` on a GPU), both in wall-clock and in CPU time; samples/s over the window; per loader: the per-sample CPU cost of each stage (read, decode, augment, collate, copy), measured apart; per machine: the cores our processes got, the CPU a batch costs, the other processes' load, accelerator utilisation, disk/network read throughput.
#
# *Experiment* (§2–§4), each run repeated in alternation, at least three trials, reported as median and range:
# 1. **Wait share.** Time the full pipeline with the timed loop. A share near zero means the input is not the bottleneck.
# 2. **The step alone.** Train on one cached batch, again and again (no loading): the best the step allows.
# 3. **The loader alone.** Iterate the DataLoader with a step that does nothing: what loading delivers at that worker count.
# 4. **Stage costs.** Time decode and augment per sample (§1); the largest is the target (here augment, then decode; the file format barely mattered, §6).
# 5. **Sweep the knobs** (`num_workers`, `prefetch_factor`, `batch_size`, `persistent_workers`) and compare the measured curve, with its spread, with the bound $1/\max(C, L/W, (L+C)/c)$ and the simulator calibrated on CPU time (§5).
#
# *Analysis:* if the pipeline reaches the loader-alone rate (within the threshold), loading is the bottleneck: add workers up to the free cores, cache decoded data, move augmentation to the accelerator, or use a cheaper format; if it reaches the step-alone rate, the model is the bottleneck and loader tuning is wasted; if it stays below both, the two compete for the same cores (here: 2 cores shared by loading and a CPU step) — the machine has too few cores for this pipeline. The cell below prints the three measured experiments and the verdict.
# ### END SOLUTION

# %% id="cell-039"
# The diagnosis in numbers, from the experiments of §3.
print(compare.format_experiments(compare.diagnose_experiments(
    exps["loader alone"], exps["compute alone"], exps["pipeline"])))

# %% [markdown] id="cell-040"
# ## 9. Summary
#
# * The share of time a training loop waits for data is the first number to measure — per step, in a steady window, synced — and a loader fixes only that share.
# * Three measured experiments (the loader alone, the step alone, the pipeline) say which stage binds; run them, and every setting, several times in alternation and read the ranges.
# * Throughput is set by the slowest resource: the step, the workers, or the cores they all share — $1/\max(C, L/W, (L+C)/c)$. On this shared 2-core VM the measured rates move with the other users' load; the tables of §4 and §5 say how far each worker count got against the bound and the calibrated model, with their ranges.
# * With the step on an accelerator the cores are free for loading and about $\lceil L/C\rceil$ workers are needed; faster accelerators need more loader CPU.
# * `prefetch_factor` smooths variation (the simulator shows what it buys), `persistent_workers` saves start-up per epoch if the epoch travels with the indices, `pin_memory` speeds the host→device copy (GPU only), a bigger batch amortises per-batch overhead.
# * Compression saves bytes and costs a decode every epoch; caching decoded pixels trades the bytes back for the decode; random augmentation cannot be cached. Formats matter for many small files and remote storage (pack into shards, memory-map).
#
# ## 10. Exercises
#
# 1. (Seed exercise 8) Design an experiment to diagnose a data-loading bottleneck — answered in §8.
# 2. With the machine widget, set 64 cores, an accelerator step of 1 ms and the load measured here. How many workers are needed? What happens to the answer if augmentation moves to the accelerator (load ÷ 5, step + 0.5 ms)?
# 3. Why do random augmentations defeat a cache of prepared samples, and what can still be cached?
# 4. Measure `batch_size=64` against 32 at `num_workers=2` with your code (`interleaved_trials(ds, {...}, trials=3, interleave=interleave, **mine)`; give the 64-sample run `window=32`, so both see the same samples). Do the ranges separate? Which per-batch costs did the bigger batch amortise?

# %% [markdown] id="cell-041"
# ### BEGIN SOLUTION
# 2. $\lceil L/C \rceil$ (`workers_needed`) with the $L$ measured here and $C$ = 1 ms: the cell below prints it; $L$ moves with the load on this shared machine, and so does the answer. Each of those workers needs a core of its own: compare the number with the 64 cores — the nearer it comes to 64, the more the cores bind as well (they deliver at most $64/L$ batches/s). With augmentation on the accelerator, $L/5$ and $C$ = 1.5 ms give $\lceil L/(7.5\text{ ms})\rceil$ (printed below too): fewer workers, and the cores are further from being the limit.
# 3. Every epoch must see a new random crop/flip of each image, so the augmented tensor differs each time; the decoded (or resized) uint8 pixels are the same every epoch and can be cached in memory or as a memory-mapped array, removing the decode (and the file reads) from every epoch after the first — at the price of the uncompressed size (the cache table of §6).
# 4. Read the two ranges: where they overlap, the measurement cannot tell the batch sizes apart. What a batch of 32 pays per batch — the collation (printed in §1), taking the batch from a worker (the CPU in `next()` that `compare.format_run` prints for a run with workers), the Python overhead of a step — is small beside 32 × (decode + augment) (§1), so doubling the batch can gain at most that share: it halves the per-batch costs per sample and leaves the per-sample work as it is.
# ### END SOLUTION

# %% id="ex9-2-numbers"
### BEGIN SOLUTION
needed_1ms = workers_needed(big.load_cpu_s, 0.001)
needed_augment_on_accelerator = workers_needed(big.load_cpu_s / 5, 0.0015)
### END SOLUTION
print(f"L = {big.load_cpu_s*1e3:.1f} ms: {needed_1ms} workers for C = 1 ms (of 64 cores); "
      f"{needed_augment_on_accelerator} with augmentation on the accelerator")
