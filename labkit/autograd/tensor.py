"""A numpy-backed Tensor with reverse-mode automatic differentiation (define-by-run).

Every op on a Tensor that requires grad records a node: the op (its forward and local
derivative live together in :mod:`labkit.autograd.ops`), its parent tensors and attributes.
That record is the *tape* 梯度带（gradient tape）. ``backward()`` orders the graph
topologically with an explicit stack (no recursion, so a 10,000-deep chain works) and walks
it in reverse, multiplying each upstream gradient by the op's local Jacobian (the
vector-Jacobian product) and summing the contributions that reach each tensor -- reverse-mode
AD (Baydin et al., "Automatic differentiation in machine learning: a survey", JMLR 2018, 3.2).

Semantics follow PyTorch: gradients of leaves accumulate in ``.grad`` across calls; a
non-scalar output needs an explicit ``gradient``; ``detach()`` and ``no_grad()`` stop
recording. Unlike PyTorch the graph is not freed by ``backward()`` (as if
``retain_graph=True``).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from labkit.autograd import counters as _counters
from labkit.autograd import rules as _rules
from labkit.autograd.ops import OPS, Op, unbroadcast
from labkit.validate import integer

_state = threading.local()


def is_grad_enabled() -> bool:
    return getattr(_state, "grad", True)


class _GradMode:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        self.prev = is_grad_enabled()
        _state.grad = self.enabled

    def __exit__(self, *exc):
        _state.grad = self.prev

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with _GradMode(self.enabled):
                return fn(*args, **kwargs)
        wrapped.__name__ = getattr(fn, "__name__", "wrapped")
        wrapped.__doc__ = fn.__doc__
        return wrapped


def no_grad() -> _GradMode:
    """Context manager / decorator: ops inside record no graph (as ``torch.no_grad``)."""
    return _GradMode(False)


def enable_grad() -> _GradMode:
    return _GradMode(True)


def _trace_stack() -> list:
    """The tapes of the traces running in this thread (innermost last; empty when not
    tracing). Thread-local, like grad mode, so a trace in one thread records nothing from
    another."""
    stack = getattr(_state, "trace", None)
    if stack is None:
        stack = _state.trace = []
    return stack


@contextmanager
def _tracing(tape: list):
    stack = _trace_stack()
    stack.append(tape)
    try:
        yield tape
    finally:
        stack.pop()


def _as_array(data, dtype=None, name: str = "data") -> np.ndarray:
    """``data`` as a numeric numpy array; None, strings, ragged lists and object arrays are
    rejected with an error that names ``name`` (issue 16)."""
    if isinstance(data, Tensor):
        data = data.data
    if data is None or isinstance(data, (str, bytes)):
        raise TypeError(f"{name} must be a number or a numeric array, got "
                        f"{type(data).__name__} {data!r}")
    try:
        arr = np.asarray(data) if dtype is None else np.asarray(data, dtype=dtype)
    except (ValueError, TypeError) as exc:      # ragged nested lists, unconvertible dtype
        raise ValueError(f"{name} must be a rectangular numeric array ({exc})") from None
    if arr.dtype == object or arr.dtype.kind in "USVMm":
        raise TypeError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if dtype is None and not isinstance(data, (np.ndarray, np.generic)) \
            and arr.dtype == np.float64:
        arr = arr.astype(np.float32)     # Python floats become float32, as in torch.tensor
    return arr


def _binary(op: str, name: str | None = None):
    """The overloads ``__name__`` (x op y) and ``__rname__`` (y op x, which Python calls
    when the left operand, a number or an array, does not know the Tensor); ``name``
    defaults to ``op``."""
    name = name or op

    def forward(self, o):
        return self._apply(op, self, o)

    def reflected(self, o):
        return self._apply(op, o, self)

    for method, dunder in ((forward, f"__{name}__"), (reflected, f"__r{name}__")):
        method.__name__, method.__qualname__ = dunder, f"OpsMixin.{dunder}"
    return forward, reflected


def _reduction(op: str):
    """A method reducing over ``axis`` (None: all), keeping reduced axes if ``keepdims``."""
    def method(self, axis=None, keepdims=False):
        return self._apply(op, self, axis=_axis(axis), keepdims=bool(keepdims))

    method.__name__, method.__qualname__ = op, f"OpsMixin.{op}"
    return method


class OpsMixin:
    """Operator overloads shared by :class:`Tensor` and forward mode's ``Dual``.

    A subclass provides ``_apply(op_name, *operands, **attrs)``.
    """
    __slots__ = ()
    __array_ufunc__ = None  # numpy array (op) Tensor defers to our reflected operators

    __add__, __radd__ = _binary("add")
    __sub__, __rsub__ = _binary("sub")
    __mul__, __rmul__ = _binary("mul")
    __truediv__, __rtruediv__ = _binary("div", "truediv")
    __pow__, __rpow__ = _binary("pow")
    __matmul__, __rmatmul__ = _binary("matmul")

    def __neg__(self): return self._apply("neg", self)
    def __getitem__(self, index): return self._apply("getitem", self, index=_freeze(index))

    def exp(self): return self._apply("exp", self)
    def log(self): return self._apply("log", self)
    def tanh(self): return self._apply("tanh", self)
    def sigmoid(self): return self._apply("sigmoid", self)
    def relu(self): return self._apply("relu", self)

    sum, mean, max = _reduction("sum"), _reduction("mean"), _reduction("max")

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return self._apply("reshape", self, shape=tuple(integer("shape", s, low=-1) for s in shape))

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = axes[0]
        return self._apply("transpose", self, axes=tuple(integer("axes", a) for a in axes) or None)

    @property
    def T(self):
        return self.transpose()


def _axis(axis):
    """``axis`` as None, an int or a tuple of ints (bools and strings are refused)."""
    def one(a):
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"axis must be None, an int or a tuple of ints, got {axis!r}")
        return int(a)
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return tuple(one(a) for a in axis)
    return one(axis)


def _freeze(index):
    if isinstance(index, Tensor):
        return index.data
    if isinstance(index, list):
        return np.asarray(index)
    if isinstance(index, tuple):
        return tuple(_freeze(i) for i in index)
    return index


class Tensor(OpsMixin):
    """An n-dimensional array that can record the operations applied to it.

    ``Tensor(data, requires_grad=False)``; ``data`` is any array-like. Python floats become
    float32 (as in ``torch.tensor``); numpy arrays keep their dtype.
    """
    __slots__ = ("data", "grad", "requires_grad", "_op", "_parents", "_attrs", "name",
                 "__weakref__")

    def __init__(self, data, requires_grad: bool = False, dtype=None, name: str | None = None):
        self.data = _as_array(data, dtype)
        if not isinstance(requires_grad, (bool, np.bool_)):
            raise TypeError(f"requires_grad must be True or False, got {requires_grad!r}")
        if requires_grad and not np.issubdtype(self.data.dtype, np.floating):
            raise ValueError(f"requires_grad=True needs a floating dtype, got {self.data.dtype}")
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self._op: Op | None = None
        self._parents: tuple = ()
        self._attrs: dict = {}
        self.name = name

    # ---- array surface ----
    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def is_leaf(self) -> bool:
        return self._op is None

    @property
    def grad_fn(self) -> str | None:
        """The name of the op that made this tensor (None for leaves)."""
        return None if self._op is None else self._op.name

    def numpy(self) -> np.ndarray:
        return self.data

    def item(self) -> float:
        if self.data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.data.item()

    def detach(self) -> "Tensor":
        """The same data, cut from the graph (shares memory, as ``torch.Tensor.detach``)."""
        return Tensor(self.data)

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        if not self.is_leaf:
            raise RuntimeError("requires_grad_ can only change leaf tensors; detach() first")
        self.requires_grad = bool(flag)
        return self

    def zero_grad(self) -> None:
        self.grad = None

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        extra = f", grad_fn={self.grad_fn}" if self._op else (
            ", requires_grad=True" if self.requires_grad else "")
        return f"Tensor({np.array2string(self.data, precision=4, threshold=20)}{extra})"

    # ---- recording ----
    def _apply(self, name: str, *operands, **attrs) -> "Tensor":
        return apply(OPS[name], *operands, **attrs)

    # ---- reverse mode ----
    def backward(self, gradient=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (reverse topological order)."""
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (and has no "
                               "grad_fn): set requires_grad=True on an input first")
        if gradient is None:
            if self.data.size != 1:
                raise RuntimeError(
                    f"backward() without a gradient works only for a scalar output; this "
                    f"tensor has shape {self.shape}: pass gradient= an array of that shape "
                    f"(e.g. ones for the sum of its elements)")
            g = np.ones_like(self.data)
        else:
            g = _as_array(gradient, name="gradient").astype(self.data.dtype, copy=False)
            if g.shape != self.shape:
                raise ValueError(f"gradient has shape {g.shape}, but the tensor has shape "
                                 f"{self.shape}; they must match")
        backprop(self, g)


def topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor ``root`` depends on through recorded ops, parents before children.

    Iterative depth-first search with an explicit stack (post-order), so depth is unlimited.
    """
    if not isinstance(root, Tensor):
        raise TypeError(f"root must be a Tensor, got {type(root).__name__}")
    order: list[Tensor] = []
    seen: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for p in node._parents:
            if id(p) not in seen:
                stack.append((p, False))
    return order


def local_vjp(node: Tensor, g: np.ndarray) -> list[tuple[Tensor, np.ndarray]]:
    """One step of reverse mode at ``node``: ``(parent, gradient)`` for each parent that
    requires grad, the gradient being ``g`` times the local Jacobian of ``node``'s op,
    summed back to the parent's shape. Parents that need no gradient are left out; a parent
    used twice (``x * x``) appears twice, and its two gradients must be added. Inside an
    active :class:`~labkit.autograd.rules.RuleSet` the op's rule is the rule set's."""
    op = node._op
    if op is None:
        raise ValueError("local_vjp needs a tensor made by an op (node.is_leaf is False); "
                         "a leaf has no parents")
    parents = node._parents
    needs = tuple(p.requires_grad for p in parents)
    xs = tuple(p.data for p in parents)
    rules = _rules.active_vjp(op)
    pgrads = (op.vjp(g, node.data, xs, needs, **node._attrs) if rules is None
              else rules.run_vjp(op, g, node.data, xs, needs, node._attrs))
    counting = _counters.active()
    if counting:
        flops = op.bwd_flops(node.data, xs, needs, **node._attrs)
        for c in counting:
            c.on_backward(op.name, flops)
    return [(p, unbroadcast(pg, p.data.shape)) for p, pg in zip(parents, pgrads)
            if pg is not None and p.requires_grad]


def accumulate_grad(leaf: Tensor, g: np.ndarray) -> None:
    """Add ``g`` into ``leaf.grad`` (create it on the first call), as PyTorch's leaves do."""
    if leaf.grad is None:
        leaf.grad = Tensor(np.array(g, dtype=leaf.data.dtype, copy=True))
    else:
        leaf.grad.data = leaf.grad.data + g


def backprop(root: Tensor, g: np.ndarray) -> None:
    """Reverse mode: walk ``topological_order(root)`` backwards, sending each node's
    gradient to its parents (:func:`local_vjp`) and summing what reaches a node from every
    child before it is processed; leaves accumulate into ``.grad``."""
    grads: dict[int, np.ndarray] = {id(root): g}
    for node in reversed(topological_order(root)):
        g = grads.pop(id(node), None)
        if g is None:
            continue
        if node._op is None:
            if node.requires_grad:
                accumulate_grad(node, g)
            continue
        for p, pg in local_vjp(node, g):
            k = id(p)
            grads[k] = grads[k] + pg if k in grads else pg


def _lift(x, like: np.ndarray | None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (int, float)) and like is not None and like.dtype.kind == "f":
        return Tensor(np.asarray(x, dtype=like.dtype))
    return Tensor(x)


def _wrap(arr: np.ndarray) -> Tensor:
    t = Tensor.__new__(Tensor)
    t.data, t.grad, t.requires_grad, t._op, t._parents, t._attrs, t.name = (
        arr, None, False, None, (), {}, None)
    return t


def run_forward(op: Op, xs: tuple, attrs: dict):
    """``op.forward(*xs, **attrs)`` (or an active rule set's forward for ``op``); a shape
    error names the op and the operand shapes."""
    rules = _rules.active_forward(op)
    if rules is not None:
        return rules.run_forward(op, xs, attrs)
    try:
        return op.forward(*xs, **attrs)
    except ValueError as exc:
        shapes = " and ".join(str(tuple(np.shape(x))) for x in xs)
        extra = "".join(f", {k}={v!r}" for k, v in attrs.items() if k != "index")
        raise ValueError(f"{op.name} cannot take operands of shapes {shapes}{extra}: "
                         f"{exc}") from exc


def apply(op: Op, *operands, **attrs) -> Tensor:
    """Run ``op`` forward on tensors and, when any input requires grad, record the node."""
    like = next((o.data for o in operands if isinstance(o, Tensor)), None)
    parents = tuple(_lift(o, like) for o in operands)
    xs = tuple(p.data for p in parents)
    out = _wrap(np.asarray(run_forward(op, xs, attrs)))
    record = is_grad_enabled() and any(p.requires_grad for p in parents)
    if record:
        out.requires_grad = True
        out._op, out._parents, out._attrs = op, parents, attrs
    tapes = _trace_stack()
    if tapes:
        tapes[-1].append((op, parents, attrs, out))
    for c in _counters.active():
        c.on_forward(op, out.data, xs, parents, attrs, record)
    return out


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def graph_nodes(*roots: Tensor) -> list[Tensor]:
    """All tensors reachable from ``roots`` through recorded ops (each once)."""
    for i, r in enumerate(roots):
        if not isinstance(r, Tensor):
            raise TypeError(f"roots[{i}] must be a labkit Tensor, got {type(r).__name__} {r!r}")
    seen: dict[int, Tensor] = {}
    stack = list(roots)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen[id(t)] = t
        stack.extend(t._parents)
    return list(seen.values())


def graph_bytes(*roots: Tensor) -> int:
    """Bytes of every non-leaf array a reference to ``roots`` keeps alive through the graph."""
    arrays = {id(t.data): t.data.nbytes for t in graph_nodes(*roots) if not t.is_leaf}
    return int(sum(arrays.values()))
