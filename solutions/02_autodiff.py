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
# # Chapter 02 · Computation graphs and automatic differentiation
#
# Every deep-learning framework turns your Python into a **computation graph** 计算图（Computation
# Graph） and differentiates it automatically. In this chapter you build that machinery with
# `labkit.autograd`, a small engine over numpy — its backward and the gradient rules it runs
# are yours — take it apart, and compare it with PyTorch and JAX.
#
# **Objectives.** After this chapter you can
# 1. explain how a tape of operations becomes a graph, and write the reverse-mode
#    `backward()` that walks it;
# 2. write the backward rules the engine runs (matrix product and `+`/`*` with broadcasting,
#    relu, sums over axes, log-softmax, indexing, softmax), test them with your own central
#    differences, and train a digits classifier with your backward and your rules;
# 3. write a forward-mode rule and both Jacobians, and measure when forward mode 前向模式 beats
#    reverse mode 反向模式 and why training uses reverse;
# 4. trace a dynamic program into a static graph 静态图, optimize it with graph passes, and
#    compare labkit's graph with TorchDynamo's and the jaxpr `jax.jit` traces;
# 5. tell `detach()` from `no_grad()` and measure the memory a forgotten graph keeps alive.
#
# **Guiding questions.** Why can one backward pass give the gradient of a million parameters?
# What does a static graph buy you that a dynamic one cannot? What does `losses.append(loss)`
# really keep?

# %% id="cell-001"
import numpy as np
import matplotlib.pyplot as plt
import torch
from IPython.display import display

from labkit.check import check
from labkit.autograd import Tensor, no_grad
from labkit.autograd.draw import draw_graph

# %% [markdown] id="cell-002"
# ## 1. A graph of scalars
#
# Run `y = tanh(w·x + b)` on tensors that require grad. Each operation records a node: the op,
# its inputs and the rule for its local derivative. The recording is the graph; nothing else is
# needed to differentiate it later. This is a *dynamic graph* 动态图 (define-by-run): it is built
# while the Python code runs, as in PyTorch.

# %% id="cell-003"
x = Tensor(2.0, requires_grad=True, name="x")
w = Tensor(-0.5, requires_grad=True, name="w")
b = Tensor(0.3, requires_grad=True, name="b")
y = (w * x + b).tanh()
y.backward()
print("y =", y.item(), "| grad_fn of y:", y.grad_fn)
print("dy/dx, dy/dw, dy/db =", x.grad.item(), w.grad.item(), b.grad.item())

xt, wt, bt = (torch.tensor(v, requires_grad=True) for v in (2.0, -0.5, 0.3))
yt = torch.tanh(wt * xt + bt)
yt.backward()
print("torch:", xt.grad.item(), wt.grad.item(), bt.grad.item(), "| grad_fn:", yt.grad_fn)
fig = draw_graph(y, title="the graph behind y = tanh(w x + b)")

# %% [markdown] id="cell-004"
# The same engine works on whole arrays: every op broadcasts as numpy does, and each op's
# backward rule sits next to its forward in `labkit/autograd/ops.py`. Below, a two-layer network
# with a cross-entropy loss (`two_layer_vs_torch` in `labkit/autograd/compare.py`); its
# gradients agree with PyTorch's to rounding error, and `gradcheck` confirms them against
# central differences in float64.

# %% id="cell-005"
from labkit.autograd.compare import two_layer_vs_torch
agree = two_layer_vs_torch(seed=0)    # cross_entropy(relu(X W1) W2, y): X 8x5, W1 5x7, W2 7x3
print("max |labkit - torch| over both gradients:", agree.max_abs_diff)
print("gradcheck ok:", agree.gradcheck.ok, "| max |analytic - numeric| =", agree.gradcheck.max_abs_error)


# %% [markdown] id="cell-006"
# ## 2. Reverse mode: a tape walked backwards
#
# Reverse-mode AD keeps a **tape** 梯度带 of the operations. `backward()` starts at the loss with
# gradient 1 and visits the nodes in **reverse topological order**: a node is processed only after
# every node that uses it has sent back its contribution. At each node it multiplies the
# upstream gradient by the local Jacobian (a *vector-Jacobian product*) and adds the result into
# the gradients of its inputs.
#
# A recursive depth-first search is the textbook way to order the graph — and it crashes on a deep
# graph (Python's recursion limit is about 1,000). Real graphs are deep: an RNN unrolled over a
# long sequence, or 10,000 small ops.
#
# ### Exercise 2.1 — topological order with an explicit stack
# Write `topo_order(root)` returning a list of every tensor reachable from `root` through
# `t._parents`, each once, parents before children, `root` last. Use a loop and a stack, no
# recursion.

# %% id="cell-007"
def topo_order(root):
    ### BEGIN SOLUTION
    # the stack holds the path from root down: each node with an iterator over its parents;
    # a node is finished (appended) once its last parent is
    order, seen = [], {id(root)}
    stack = [(root, iter(root._parents))]
    while stack:
        node, parents = stack[-1]
        for p in parents:
            if id(p) not in seen:
                seen.add(id(p))
                stack.append((p, iter(p._parents)))
                break
        else:
            stack.pop()
            order.append(node)
    return order
    ### END SOLUTION


# %% labkit={"exercise": "2.1"} tags=["check"]
check("2.1", topo_order)

# %% id="cell-009"
import sys
from labkit.autograd.examples import deep_chain
print("Python's recursion limit here:", sys.getrecursionlimit())
deep, z = deep_chain(10_000, 1.0001)   # z = deep * 1.0001 * 1.0001 * ... (10,000 multiplications)
order = topo_order(z)
print(len(order), "tensors in your order; the first is a leaf:", order[0].is_leaf,
      "| the last is z:", order[-1] is z)

# %% [markdown] id="backward-md"
# ### Exercise 2.6 — `backward()` over your order
#
# Now use your order. Write `backward(loss)`: the gradient of `loss` with respect to every
# tensor it depends on, stored in the `.grad` of the leaves that require grad — what
# `loss.backward()` does in PyTorch (and in labkit, which you may not call here).
#
# * Start from `d loss / d loss = 1` (`np.ones_like(loss.data)`); keep the gradient of each
#   node in a dict keyed by `id(node)`.
# * Walk `topo_order(loss)` **in reverse**: when a node is reached, every node that uses it
#   has already sent its contribution, so its gradient is complete.
# * For a node made by an op, `local_vjp(node, g)` returns `(parent, gradient)` pairs — the
#   upstream gradient `g` times the op's local Jacobian (the rules of section 3). A parent
#   that feeds two nodes (or one node twice, as in `x * x`) receives two contributions: **add**
#   them (`+=`), never overwrite.
# * A leaf (`node.is_leaf`) that requires grad accumulates: `accumulate_grad(leaf, g)` adds
#   `g` into `leaf.grad`, so calling backward twice sums the gradients, as in PyTorch.
#
# The check compares your gradients with PyTorch's on a diamond, on `x * x`, on a two-layer
# network, on a 200-deep chain and on a digits MLP. It also counts your calls of `local_vjp`
# on a chain of 14 diamonds (`x = tanh(x) + x/2`, 14 times): there are 2¹⁴ paths from the
# loss to `x`, and a backward that follows each path (sending every contribution on as soon
# as it arrives) makes thousands of calls where adding first makes one per node.

# %% id="backward-code"
from labkit.autograd import local_vjp, accumulate_grad

def backward(loss):
    ### BEGIN SOLUTION
    # every node collects the contributions its consumers send; in reverse topological
    # order they have all arrived when the node is reached, and their sum is its gradient
    sent = {id(loss): [np.ones_like(loss.data)]}
    for node in reversed(topo_order(loss)):
        parts = sent.pop(id(node), [])
        if not parts:
            continue                    # the loss does not depend on it
        g = sum(parts[1:], start=parts[0])
        if not node.is_leaf:
            for parent, pg in local_vjp(node, g):
                sent.setdefault(id(parent), []).append(pg)
        elif node.requires_grad:
            accumulate_grad(node, g)
    ### END SOLUTION


# %% labkit={"exercise": "2.6"} tags=["check"]
check("2.6", backward)

# %% id="backward-deep"
backward(z)
print("your backward through 10,000 multiplications: d z / d deep =", deep.grad.item(),
      "| closed form 1.0001**10000 =", 1.0001 ** 10_000)


# %% [markdown] id="cell-010"
# ## 3. The rules your engine runs
#
# Every `local_vjp` above ran one of labkit's rules (`labkit/autograd/ops.py`). In this
# section you write them — the rules a digits classifier needs — and then train it with your
# backward *and* your rules. A rule maps the gradient `g` of an op's output to the gradients
# of its inputs, each **with that input's shape**. `labkit.autograd.rules.RuleSet` is the
# switch: inside `with RuleSet(matmul=matmul_backward, ...)` the engine calls your function
# for that op instead of labkit's. Where one of yours fails — it raises, returns another
# shape, or a forward returns NaN — labkit's rule takes over for that call and the rule set
# says so (`report()`); an exercise whose check fails hands its name to labkit's reference,
# and the report says that too.
#
# ### Exercise 2.7 — central differences, to test every rule you write
# A rule computes the vector-Jacobian product `gᵀ J`: the gradient of `⟨g, f(x)⟩`. Numerically,
# each entry is `(⟨g, f(x + h eᵢ)⟩ − ⟨g, f(x − h eᵢ)⟩) / 2h`, with error O(h²) — the one-sided
# difference `(f(x + h) − f(x)) / h` errs by about `h f''/2`, a million times more at h = 10⁻⁶.
# Write `numeric_vjp(f, xs, g, h=1e-6)`: `f` takes the arrays of the list `xs`; return one
# gradient per array, each of its shape.

# %% id="numeric-code"
def numeric_vjp(f, xs, g, h=1e-6):
    ### BEGIN SOLUTION
    grads = []
    for i, x in enumerate(xs):
        grad = np.zeros_like(x)
        for j in np.ndindex(x.shape):
            old = x[j]
            x[j] = old + h
            up = np.sum(g * f(*xs))
            x[j] = old - h
            down = np.sum(g * f(*xs))
            x[j] = old
            grad[j] = (up - down) / (2 * h)
        grads.append(grad)
    return grads
    ### END SOLUTION


# %% labkit={"exercise": "2.7"} tags=["check"]
check("2.7", numeric_vjp)


# %% [markdown] id="matmul-md"
# ### Exercise 2.2 — matmul backward with broadcasting
# For `C = A @ B`: `dA = g @ Bᵀ` and `dB = Aᵀ @ g`. With a batch of matrices `A` of shape
# `(batch…, n, k)` and one `B` of shape `(k, m)`, numpy *broadcasts* `B` over the batch — and
# the adjoint of broadcasting is a **sum**: the gradient of `B` must be summed over every axis
# that broadcasting added or stretched. Write `_sum_to(x, shape)` (sum `x` down to `shape`:
# the leading axes broadcasting added, then — keeping them — the axes of size 1 it stretched)
# and `matmul_backward(g, a, b)` returning `(grad_a, grad_b)` with the shapes of `a` and `b`
# (operands with at least two dimensions; the engine promotes a vector to a matrix first).

# %% id="cell-011"
def _sum_to(x, shape):
    ### BEGIN SOLUTION
    while x.ndim > len(shape):
        x = x.sum(axis=0)
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x
    ### END SOLUTION

def matmul_backward(g, a, b):
    ### BEGIN SOLUTION
    ga = g @ np.swapaxes(b, -1, -2)
    gb = np.swapaxes(a, -1, -2) @ g
    return _sum_to(ga, a.shape), _sum_to(gb, b.shape)
    ### END SOLUTION


# %% labkit={"exercise": "2.2"} tags=["check"]
check("2.2", matmul_backward)

# %% id="matmul-try"
# your rule against your central differences: A (4, 3, 5) @ B (5, 2), B broadcast over the batch
r = np.random.default_rng(0)
a, b, g = r.normal(size=(4, 3, 5)), r.normal(size=(5, 2)), r.normal(size=(4, 3, 2))
for name, mine_, numeric in zip(("grad_a", "grad_b"), matmul_backward(g, a, b),
                                numeric_vjp(np.matmul, [a, b], g)):
    print(f"{name}: shape {mine_.shape}, max |yours - central differences| = "
          f"{np.abs(mine_ - numeric).max():.1e}")


# %% [markdown] id="elementwise-md"
# ### Exercises 2.8 and 2.9 — `+` and `*` with broadcasting
# A layer adds its bias, shape `(d,)`, to a batch of shape `(n, d)`: the bias is broadcast over
# the batch, so its gradient is `g` summed over the batch. Write `add_backward(g, a, b)` and
# `mul_backward(g, a, b)` (`d(a·b)/da = b`), each returning `(grad_a, grad_b)` summed back to
# the inputs' shapes with your `_sum_to` (an input may be a 0-d array: a Python number).

# %% id="elementwise-code"
def add_backward(g, a, b):
    ### BEGIN SOLUTION
    return _sum_to(g, np.shape(a)), _sum_to(g, np.shape(b))
    ### END SOLUTION

def mul_backward(g, a, b):
    ### BEGIN SOLUTION
    return _sum_to(g * b, np.shape(a)), _sum_to(g * a, np.shape(b))
    ### END SOLUTION


# %% labkit={"exercise": "2.8"} tags=["check"]
check("2.8", add_backward)

# %% labkit={"exercise": "2.9"} tags=["check"]
check("2.9", mul_backward)


# %% [markdown] id="relu-sum-md"
# ### Exercises 2.10 and 2.11 — relu, and a sum over axes
# `relu_backward(g, x)` passes `g` where `x > 0` and 0 elsewhere — at `x = 0` too, as PyTorch
# does (its rule is `threshold_backward(grad, result, 0)`). `sum_backward(g, shape, axis,
# keepdims)` returns the gradient of `x.sum(axis=axis, keepdims=keepdims)` for an input of
# `shape`: every element reached the sum once, so it is `g` broadcast back — after putting the
# summed axes back as size 1 when `keepdims` is False (`axis`: None, an int or a tuple, maybe
# negative). Without that, `g` of shape `(3,)` from summing a `(3, 3)` input over axis 1
# broadcasts along the wrong axis and silently gives the wrong gradient. The engine runs your
# sum rule for `mean` too, divided by the number of elements averaged.

# %% id="relu-sum-code"
def relu_backward(g, x):
    ### BEGIN SOLUTION
    return g * (x > 0)
    ### END SOLUTION

def sum_backward(g, shape, axis, keepdims):
    ### BEGIN SOLUTION
    ndim = len(shape)
    axes = range(ndim) if axis is None else np.atleast_1d(axis)
    axes = tuple(int(a) % ndim for a in axes)
    if not keepdims:
        g = np.expand_dims(g, axes)
    return np.broadcast_to(g, shape)
    ### END SOLUTION


# %% labkit={"exercise": "2.10"} tags=["check"]
check("2.10", relu_backward)

# %% labkit={"exercise": "2.11"} tags=["check"]
check("2.11", sum_backward)

# %% [markdown] id="gelu-md"
# ### Exercise 2.17 — GELU's VJP
# GELU, `x Φ(x)` with Φ the standard normal distribution function, "weights inputs by their
# value, rather than gates inputs by their sign as in ReLUs" (Hendrycks & Gimpel, *Gaussian
# Error Linear Units*, 2016). labkit's op `gelu` is the exact form, `Φ(x) = (1 + erf(x/√2)) / 2`,
# which is PyTorch's default (`torch.nn.functional.gelu(x)`, `approximate='none'`), not the
# tanh approximation `0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))` that GPT-2's code uses. Write
# `gelu_backward(g, x)`: by the product rule the derivative is `Φ(x) + x φ(x)`, with
# `φ(x) = exp(−x²/2) / √(2π)` the normal density, and the rule returns `g` times it.

# %% id="gelu-code"
from scipy.special import erf

def gelu_backward(g, x):
    ### BEGIN SOLUTION
    cdf = 0.5 * (1 + erf(x / np.sqrt(2)))
    density = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    return g * (cdf + x * density)
    ### END SOLUTION


# %% labkit={"exercise": "2.17"} tags=["check"]
check("2.17", gelu_backward)

# %% id="gelu-engine"
# labkit's gelu op in the engine, your rule and PyTorch's autograd, at seven points
from labkit.autograd import apply
from labkit.autograd.ops import OPS
x0 = np.linspace(-3, 3, 7)
xt, xtorch = Tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
apply(OPS["gelu"], xt).sum().backward()
torch.nn.functional.gelu(xtorch).sum().backward()
print("labkit's op:", xt.grad.data.round(4))
print("your rule:  ", gelu_backward(np.ones(7), x0).round(4))
print("PyTorch:    ", xtorch.grad.numpy().round(4))


# %% [markdown] id="log-softmax-md"
# ### Exercises 2.12 and 2.13 — log-softmax, forward and backward
# Cross-entropy is `−log_softmax(logits)[i, yᵢ]`, averaged. `log_softmax(x) = x − log Σ exp(x)`
# overflows as written: `exp(710)` is infinite in float64, and logits in the hundreds are
# ordinary in a badly scaled network. Subtract the maximum first, `z = x − max x`, and return
# `z − log Σ exp(z)` (never `log(softmax(x))`, which loses probabilities below 10⁻³⁰⁸). Its
# backward, with `y = log_softmax(x)`, is `g − softmax(x) Σ g = g − exp(y) Σ g` along the axis.
# The check of 2.13 also runs labkit's `cross_entropy` with your rule in the engine and
# compares the gradient of the logits with PyTorch's.

# %% id="log-softmax-code"
def log_softmax(x, axis=-1):
    ### BEGIN SOLUTION
    z = x - x.max(axis=axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=axis, keepdims=True))
    ### END SOLUTION

def log_softmax_backward(g, y, axis=-1):
    ### BEGIN SOLUTION
    return g - np.exp(y) * g.sum(axis=axis, keepdims=True)
    ### END SOLUTION


# %% labkit={"exercise": "2.12"} tags=["check"]
check("2.12", log_softmax)

# %% labkit={"exercise": "2.13"} tags=["check"]
check("2.13", log_softmax_backward)


# %% [markdown] id="getitem-md"
# ### Exercise 2.14 — indexing
# Cross-entropy picks `logp[arange(N), targets]`; an embedding picks rows `E[ids]`.
# `getitem_backward(g, shape, index)` returns zeros of the input's shape with `g` put back at
# `index` — and when an index repeats (the same word twice in a batch), its gradients **add
# up**. `full[index] = g` keeps only the last one, and so does `full[index] += g` (numpy
# buffers it); `np.add.at(full, index, g)` accumulates.

# %% id="getitem-code"
def getitem_backward(g, shape, index):
    ### BEGIN SOLUTION
    full = np.zeros(shape, dtype=g.dtype)
    np.add.at(full, index, g)
    return full
    ### END SOLUTION


# %% labkit={"exercise": "2.14"} tags=["check"]
check("2.14", getitem_backward)


# %% [markdown] id="cell-013"
# ### Exercise 2.3 — softmax backward
# For `s = softmax(x)` along the last axis the Jacobian is `diag(s) − s sᵀ`. Never build it:
# write `softmax_backward(g, s)` computing `Jᵀ g` in O(n) per row.

# %% id="cell-014"
def softmax_backward(g, s):
    ### BEGIN SOLUTION
    return s * (g - (g * s).sum(axis=-1, keepdims=True))
    ### END SOLUTION


# %% labkit={"exercise": "2.3"} tags=["check"]
check("2.3", softmax_backward)

# %% id="cell-016"
# your rules, in labkit's engine, against PyTorch's autograd on examples none of the checks used
from labkit.autograd.rules import RuleSet
from labkit.autograd.compare import format_rule_errors, rules_vs_torch

my_rules = RuleSet(matmul=matmul_backward, add=add_backward, mul=mul_backward,
                   relu=relu_backward, sum=sum_backward, log_softmax=log_softmax_backward, getitem=getitem_backward,
                   softmax=softmax_backward, forward={"log_softmax": log_softmax})
print(format_rule_errors(rules_vs_torch(my_rules)))

# %% [markdown] id="digits-md"
# **Train with them.** The digits classifier below (64 → 32 → 10, ReLU, cross-entropy, Adam)
# runs every step through *your* `backward` and, inside the rule set, *your* rules: the matrix
# products, the bias additions, relu, log-softmax forward and backward, the indexing of the
# targets and the mean over the batch (your sum rule). First its gradients on one batch are
# compared with PyTorch's on the same float64 weights; then it trains for ten epochs, and the
# rule set reports how often each of your rules ran. Predict first: what test accuracy will ten
# epochs reach (a fraction between 0 and 1)?

# %% id="digits-predict"
from labkit.check import predict, reveal
### BEGIN SOLUTION
guess = 0.9
### END SOLUTION
predict("2.digits", guess, "test accuracy of the digits MLP after 10 epochs with your backward "
        "and your rules")

# %% id="digits-train"
from labkit.training.train import torch_gradient_error, train_digits
print(f"max |your gradient - torch's| on one batch: "
      f"{torch_gradient_error(backward, rules=my_rules):.1e}")
result = train_digits(hidden=32, epochs=10, backward=backward, rules=my_rules)
print("mean training loss per epoch:", [round(l, 3) for l in result.losses])
print(my_rules.report())
reveal("2.digits", round(result.test_accuracy, 3))


# %% [markdown] id="cell-017"
# ## 4. Forward mode and the cost of a Jacobian
#
# Forward mode carries a *tangent* along with each value: a **dual number** `x + ẋ ε` with
# `ε² = 0`. Evaluating `f` on it yields `f(x) + (J ẋ) ε` — a Jacobian-vector product (JVP) in
# the same pass. `labkit.autograd.jvp(fn, primals, tangents)` does exactly that; each op's JVP
# rule sits beside its VJP rule.
#
# ### Exercise 2.4 — a forward-mode rule
# Write `div_jvp(ta, tb, a, b)`: the tangent of `a / b` given the tangents `ta`, `tb` of `a`, `b`.

# %% id="cell-018"
def div_jvp(ta, tb, a, b):
    ### BEGIN SOLUTION
    return ta / b - a * tb / (b * b)
    ### END SOLUTION


# %% labkit={"exercise": "2.4"} tags=["check"]
check("2.4", div_jvp)

# %% id="cell-020"
from labkit import autograd as ag   # the module: its jvp/vjp are exercises 2.15 and 2.16
a0, b0 = np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 5.0])
ta0, tb0 = np.array([1.0, 0.0, -1.0]), np.array([0.5, 1.0, 0.0])
value, tangent = ag.jvp(lambda p, q: p / q, (a0, b0), (ta0, tb0))
print("labkit jvp:", tangent, "| your rule:", div_jvp(ta0, tb0, a0, b0))


# %% [markdown] id="jacobian-md"
# ### Exercises 2.15 and 2.16 — the full Jacobian, column by column or row by row
# For `f: ℝⁿ → ℝᵐ`, one forward pass with the tangent `eᵢ` gives column `i` of the Jacobian;
# one reverse pass from output `j` gives row `j`. Write `jacobian_forward(f, x)` with `jvp`
# (n passes) and `jacobian_reverse(f, x)` with **your** `backward` (m passes: the gradient of
# the output's `j`-th element, `f(xt).reshape(-1)[j]`, with respect to a fresh
# `xt = Tensor(x, requires_grad=True)`). Both return the `(m, n)` Jacobian. The checks count
# your calls of `f`: one per pass.

# %% id="jacobian-code"
def jacobian_forward(f, x):
    ### BEGIN SOLUTION
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = 1.0
        cols.append(ag.jvp(f, (x,), (e,))[1].ravel())
    return np.stack(cols, axis=1)
    ### END SOLUTION

def jacobian_reverse(f, x):
    ### BEGIN SOLUTION
    rows, j, m = [], 0, 1
    while j < m:
        xt = Tensor(x, requires_grad=True)
        y = f(xt).reshape(-1)
        m = y.shape[0]
        backward(y[j])
        rows.append(xt.grad.data.ravel())
        j += 1
    return np.stack(rows, axis=0)
    ### END SOLUTION


# %% labkit={"exercise": "2.15"} tags=["check"]
check("2.15", jacobian_forward)

# %% labkit={"exercise": "2.16"} tags=["check"]
check("2.16", jacobian_reverse)

# %% [markdown] id="cell-021"
# **Which mode is cheaper?** The full Jacobian costs `n` forward passes or `m` reverse passes
# (each a small constant times one evaluation of `f`). A loss has `m = 1` and millions of
# inputs: reverse mode wins by a factor of about `n`. The measurement below times *your* two
# Jacobians (the reverse one runs your backward and, inside the rule set, your rules) on
# `f(x) = W₂ tanh(W₁ x)`; the widget after it moves `n` and `m` and shows the crossing near
# `n ≈ m`.

# %% id="modes-predict"
### BEGIN SOLUTION
guess = 64
### END SOLUTION
predict("2.passes", guess, "passes forward mode needs for the full Jacobian of f: R^64 -> R^1")

# %% id="cell-022"
from labkit.autograd.forward import mode_cost, mode_cost_sweep
from labkit.autograd.plots import plot_mode_cost
yours = (jacobian_forward, jacobian_reverse)
with my_rules:
    for n, m in [(64, 1), (1, 64), (16, 16)]:
        c = mode_cost(n, m, jacobians=yours)
        print(f"n={n:>2}, m={m:>2}: forward {c.forward_passes:>2} passes, reverse "
              f"{c.reverse_passes:>2} passes -> {c.cheaper} mode is faster")
    sweep = mode_cost_sweep([1, 8, 16, 32, 48, 64], m=1, jacobians=yours)
reveal("2.passes", mode_cost(64, 1).forward_passes)
fig = plot_mode_cost(sweep, title="m = 1 (a loss), your Jacobians")

# %% id="cell-023"
from labkit.autograd.widgets import mode_cost_widget
mode_cost_widget()

# %% [markdown] id="cell-024"
# ## 5. Dynamic vs static graphs
#
# A dynamic graph is rebuilt on every call: easy to debug (it is just Python), but the framework
# sees one op at a time. A static graph is recorded once — here by `trace(fn, example)` — and can
# then be analysed as a whole and rewritten by **passes**:
#
# * constant folding 常量折叠 computes subexpressions that do not depend on the input once;
# * dead-code elimination 死代码消除 drops values no output needs;
# * operator fusion 算子融合 merges chains of elementwise ops into one kernel, so intermediates
#   are never written to memory.
#
# The program below has one target for each pass per layer. Every pass returns a new graph that
# gives the same result on *new* inputs.

# %% id="passes-predict"
### BEGIN SOLUTION
guess = 3
### END SOLUTION
predict("2.kernels", guess, "kernels left in the depth-1 program after folding, DCE and fusion "
        "(the traced graph runs 8)")

# %% id="cell-025"
from labkit.autograd.examples import optimize_program
run = optimize_program(depth=1)   # trace layered_program(depth=1), then fold -> DCE -> fuse
print(run.traced)
print(run.optimized)
print("same result on a new input:", run.same_on_new_input)
for name, g_ in [("traced", run.traced), ("optimized", run.optimized)]:
    print(f"{name:>9}: {g_.stats()}")
reveal("2.kernels", run.optimized.stats().kernels)

# %% id="cell-026" tags=["browser-test"]
from labkit.autograd.widgets import graph_pass_widget
graph_pass_widget()


# %% [markdown] id="cell-027"
# ### Exercise 2.5 — dead-code elimination
# Write the pass `eliminate_dead_code(graph)`. A `Graph` has `nodes` (in topological order; each
# `Node` has `.name`, `.op` and `.inputs`, a tuple of names), `inputs` and `outputs` (names).
# Return `graph.with_nodes(kept)`: the input nodes plus every node some output depends on, in
# the original order. Do not modify the graph you are given.

# %% id="cell-028"
def eliminate_dead_code(graph):
    ### BEGIN SOLUTION
    live = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node.name in live:
            live.update(node.inputs)
    return graph.with_nodes(n for n in graph.nodes if n.name in live or n.op == "input")
    ### END SOLUTION


# %% labkit={"exercise": "2.5"} tags=["check"]
check("2.5", eliminate_dead_code)

# %% id="cell-030"
mine = optimize_program(depth=3, dead_code=eliminate_dead_code)   # fold -> your DCE -> fuse
print("kernels:", mine.traced.stats().kernels, "->", mine.optimized.stats().kernels,
      "| same output:", mine.same_on_new_input)
fig = draw_graph(mine.optimized, title="depth 3 after folding, your DCE and fusion")

# %% [markdown] id="cell-031"
# **PyTorch's own static graphs.** `torch.fx.symbolic_trace` records a module's forward into a
# graph of nodes (placeholders, calls, output) that passes can rewrite and turn back into Python.
# It traces symbolically, with proxy values, so data-dependent control flow stops it. It is *not*
# how `torch.compile` captures programs: `torch.compile`'s front end is TorchDynamo (next
# cell), which reads Python bytecode and hands the back end the same kind of FX graph
# (PyTorch docs, "torch.fx" and "TorchDynamo overview"). Here is the seed's `SimpleNet`
# (seed 000, example 1), traced, printed and rewritten by a tiny pass that swaps ReLU for GELU.

# %% id="seed-example1"
import inspect
from labkit.autograd.fx_passes import swap_and_compare
from labkit.perf.stack import simple_net

print(inspect.getsource(simple_net))   # the seed's model
net = simple_net(seed=0)               # calls torch.manual_seed(0) first
swap = swap_and_compare(net, torch.nn.ReLU, torch.nn.functional.gelu, torch.randn(5, 10))  # a graph pass
print(swap.traced)
print(f"replaced {swap.replaced} ReLU call(s) by gelu:")
print(swap.code)
print("changed the function:", swap.changed)

# %% [markdown] id="cell-033"
# `torch.compile` goes further. Its front end, TorchDynamo, reads the *bytecode* of an ordinary
# Python function and cuts static graphs of tensor ops out of it; its back end, TorchInductor,
# generates fused kernels from them — C++/OpenMP on a CPU, Triton on a GPU. Inductor's first
# compile on a CPU runs a C++ compiler for tens of seconds, so here we plug in a back end that only
# records what Dynamo captured (`dynamo_capture`: pass it any function of tensors to try your
# own). Watch the data-dependent `if` in `graph_break_step` below: Python needs the *value* of
# `y.sum() > 0`, so Dynamo ends the graph there, runs that line in Python and starts a second
# graph — a **graph break**（图中断）, the static-graph price of dynamic control flow.

# %% id="cell-034"
from labkit.autograd.fx_passes import dynamo_capture, graph_break_step, inductor_cpp_compiler

print(inspect.getsource(graph_break_step))
cap = dynamo_capture(graph_break_step, torch.linspace(-1, 2, 7))
print(f"{len(cap.graphs)} graphs ({cap.graph_breaks} graph break), ops per graph {cap.ops}, "
      f"same result as eager: {cap.matches_eager}")
for i, src in enumerate(cap.graphs):
    print(f"--- graph {i}\n{src}")
print("C++ compiler Inductor would use on this machine:", inductor_cpp_compiler() or "none found")

# %% [markdown] id="jax-md"
# **JAX: the same function, traced by `jax.jit`.** The seeds set PyTorch beside TensorFlow and
# JAX. JAX's `jit` calls your Python function once with *tracers*, stand-ins that carry only a
# shape and a dtype, and records the primitives they meet as a **jaxpr**, JAX's typed,
# functional intermediate language, which XLA compiles and `jax.grad` transforms (JAX docs,
# "Tracing" and "JAX internals: the jaxpr language"). `jax.make_jaxpr` shows it. Below,
# `seed_layer(x, w, b, tanh) = sum(tanh(x @ w + b)²)`, written once, captured by labkit's
# `trace`, by TorchDynamo and by `jax.make_jaxpr` on the same inputs, then the jaxpr of its
# gradient (`labkit/autograd/frameworks.py`). Predict: how many equations does the jaxpr of the
# forward have? (labkit's graph and Dynamo's each have 5 ops.)

# %% id="jax-predict"
### BEGIN SOLUTION
guess = 5
### END SOLUTION
predict("2.jaxpr", guess, "equations in the jaxpr of seed_layer (labkit's trace: 5 ops)")

# %% id="jax-graphs"
from labkit.autograd.frameworks import jit_data_dependent_if, seed_layer, three_graphs

print(inspect.getsource(seed_layer))
three = three_graphs()
for name, text in [("labkit trace", three.labkit), ("TorchDynamo FX graph", three.dynamo),
                   (f"jax.make_jaxpr (JAX {three.jax_version})", three.jaxpr)]:
    print(f"--- {name}\n{text}")
print("ops per graph:", three.ops, "| same value in all three:", three.agree)
reveal("2.jaxpr", three.ops["jax"])
print(f"--- the jaxpr of jax.grad with respect to (w, b)\n{three.grad_jaxpr}")
prims = three.primitives("grad_jaxpr")
print("add_any (gradient contributions added):", prims.get("add_any", 0),
      "| reduce_sum (a broadcast's adjoint, among others):", prims.get("reduce_sum", 0))
jit_if = jit_data_dependent_if()
print("graph_break_step in jax.numpy, eagerly:", "runs" if jit_if.eager_ok else "fails",
      f"| under jax.jit: {jit_if.error}: {jit_if.message}")

# %% [markdown] id="jax-after"
# The jaxpr has one equation more than the other two graphs: `broadcast_in_dim` turns `b` of
# shape `(3,)` into `(1, 3)` before the `add` — JAX writes broadcasting out, where labkit and
# PyTorch leave it inside `add`. Its gradient shows the two things your rules do: `reduce_sum`
# over axis 0 is the adjoint of that broadcast (your `_sum_to` for the bias), and `add_any`
# adds the two contributions that reach `g = tanh(...)`, used twice in `h * h` (your `+=` in
# `backward`). And where Dynamo cut `graph_break_step` into two graphs, `jax.jit` refuses it:
# a tracer has no value, so `if y.sum() > 0` cannot be decided while tracing
# (`TracerBoolConversionError`); JAX asks for `jnp.where` or `jax.lax.cond`, which put both
# branches in the graph (JAX docs, "Control flow and logical operators with JIT").
# TensorFlow, the seeds' third framework, is left out of this course's environment: JAX (384 MB
# installed, 18 s to install here) already shows a tracing compiler beside Dynamo. Its
# `tf.function` traces a Python function into a graph too, and its AutoGraph rewrites such an
# `if` on a tensor into a `tf.cond` in the graph (TensorFlow API docs, `tf.autograph`) — a third
# answer to the same question.

# %% [markdown] id="cell-035"
# ## 6. Programmer's view: `detach()`, `no_grad()` and a slow leak
#
# * `t.detach()` returns the same data cut from the graph: the value is kept, the history is not.
#   Use it to log or store a value, or to stop gradients through part of a computation.
# * `with no_grad():` records nothing at all inside the block: no graph, no saved activations.
#   Use it for evaluation, inference and optimizer updates.
#
# The classic leak: `losses.append(loss)` keeps the loss tensor, the loss keeps its graph, and
# the graph keeps the activations saved for backward. Below, the bytes a list of losses keeps
# alive, measured in labkit (which never frees a graph in use) and in PyTorch (saved tensors
# followed with `saved_tensors_hooks` and weak references).

# %% id="leak-predict"
from labkit.training.leak import STRATEGIES
### BEGIN SOLUTION
guess = "tensor"
### END SOLUTION
predict("2.leak", guess, "in PyTorch without backward, which list keeps the most bytes per step: "
        "losses.append(loss), (loss.detach()) or (loss.item())?", choices=STRATEGIES)

# %% id="cell-036"
from labkit.training.leak import format_leak_table, leak_table, worst_strategy
rows = leak_table(steps=5)
print(format_leak_table(rows))
reveal("2.leak", worst_strategy(rows, engine="torch", backward=False))

# %% [markdown] id="cell-037"
# PyTorch frees saved tensors inside `backward()`, so in a training loop the kept list costs
# little — but where no backward follows (an evaluation loop without `no_grad`, a loss only
# logged), every kept loss pins a full set of activations, and memory grows step after step.
# labkit keeps every intermediate while the graph is referenced, so there the leak is larger and
# appears with or without backward. `.item()` or `.detach()` fixes both.

# %% id="cell-038"
from labkit.training.widgets import leak_widget
leak_widget()

# %% [markdown] id="cell-039"
# ## Summary
#
# * A framework records a graph of ops (a tape); reverse mode walks it in reverse topological
#   order, multiplying upstream gradients by local Jacobians and adding (`+=`) the contributions
#   that meet at a shared node — iteratively, so depth is no limit, and once per node, so the
#   number of paths is no limit either. You wrote it.
# * You wrote the rules it runs — matmul, `+` and `*` with broadcasting, relu, sums over axes,
#   log-softmax forward and backward, indexing, softmax — tested them with your own central
#   differences, and trained a digits classifier with your backward and your rules.
# * A backward rule sums over broadcast axes; a repeated index adds; log-softmax subtracts the
#   maximum before `exp`; softmax's rule needs no Jacobian matrix.
# * A full Jacobian costs `n` forward or `m` reverse passes; a scalar loss makes reverse mode the
#   right choice.
# * Static graphs can be optimized as a whole: folding, dead-code elimination, fusion. labkit's
#   `trace`, TorchDynamo and `jax.jit` capture the same function three ways; where a Python
#   `if` needs a tensor's value, Dynamo breaks the graph and `jax.jit` refuses.
# * `detach()` cuts history from a value, `no_grad()` never records it; a kept loss keeps its graph.
#
# ## Exercises (from the seed)

# %% [markdown] id="seed-ex1"
# **1. Explain the difference between static and dynamic computation graphs, their advantages and
# where each fits.**
#
# ### BEGIN SOLUTION
# A static graph is defined completely before it runs (TensorFlow 1.x, a `trace`d labkit graph,
# a `torch.fx` graph): the framework sees the whole program, so it can fold constants, drop dead
# code, fuse elementwise ops (section 5: kernels and intermediate bytes fell), plan memory and
# export the graph for deployment without Python. The price: control flow is frozen at trace time
# and debugging happens on a graph, not on your code. A dynamic graph is built as the code runs
# (PyTorch eager, labkit's `Tensor`): any Python control flow, print-debugging, shapes that change
# per batch — but each op is dispatched alone, with little room for global optimization. Dynamic
# fits research and models with data-dependent control flow; static fits deployment, fixed-shape
# production training and compilers. Modern systems mix both: `torch.compile` captures static
# subgraphs from dynamic code; JAX traces Python functions with `jit`.
# ### END SOLUTION

# %% [markdown] id="seed-ex2"
# **2. Why is reverse-mode AD better suited to gradients in deep learning than forward mode?
# Argue from computational complexity.**
#
# ### BEGIN SOLUTION
# For `f: ℝⁿ → ℝᵐ` one forward-mode pass computes `J v` (one column of the Jacobian) and one
# reverse-mode pass computes `uᵀ J` (one row), each at a small constant times the cost of
# evaluating `f`. The gradient of a loss is the single row of a `1 × n` Jacobian: reverse mode
# needs one pass, forward mode `n` passes, with `n` the number of parameters (millions or
# billions). So reverse mode costs O(cost(f)) and forward mode O(n · cost(f)). The measurement in
# section 4 shows the forward time growing linearly in `n` while the reverse time stays flat for
# `m = 1`, and the roles swap when `m > n`. The price of reverse mode is memory: it must keep the
# intermediate values (the tape) until the backward pass — chapter 03 measures that.
# ### END SOLUTION

# %% [markdown] id="seed-ex7"
# **7. In PyTorch, what is the difference between `.detach()` and `with torch.no_grad()`? When do
# you use each?**
#
# ### BEGIN SOLUTION
# `.detach()` acts on one tensor: it returns a tensor sharing the same storage with
# `requires_grad=False` and no `grad_fn`, so the graph behind it is no longer referenced through
# it. Operations before it were recorded (and may still be needed by other references). Use it
# to store or log values (`losses.append(loss.detach())` or `loss.item()`), to stop gradients
# through a branch (targets in a loss, a frozen teacher's outputs), or to hand a tensor to numpy.
# `torch.no_grad()` acts on a block of code: no op inside records a graph and nothing is saved
# for backward, which saves memory and time. Use it for evaluation and inference loops and for
# in-place parameter updates. Measured in section 6: keeping `loss` tensors without backward grew
# memory by the activations of every step; `.detach()` and `.item()` kept nothing.
# ### END SOLUTION
