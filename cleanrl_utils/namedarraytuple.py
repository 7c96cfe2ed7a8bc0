"""Named tuples of arrays that index like one array, and buffers allocated from examples.

A *namedarraytuple* is a :func:`collections.namedtuple` whose fields are numpy arrays, torch
tensors, ``None`` or other namedarraytuples, and whose ``[]`` operator applies to every field at
once. With ``Samples = namedarraytuple("Samples", ["obs", "act"])`` and a buffer
``buf = Samples(obs=zeros[T, B, 4], act=zeros[T, B])``:

- ``buf[t]`` is ``Samples(obs=buf.obs[t], act=buf.act[t])`` (shapes ``[B, 4]`` and ``[B]``);
- ``buf[t] = step`` writes each field of ``step`` into the matching field of ``buf``;
- ``buf[t] = 0`` writes 0 into every field.

Fields are read by name (``buf.obs``, ``buf.get("obs")``), never by position: ``buf[0]`` is row 0
of every field. ``len(buf)`` is the number of fields, not a batch size.

The helpers allocate such buffers from one example (:func:`buffer_from_example`), optionally in
shared memory, build examples from gymnasium spaces (:func:`example_from_space`) and convert
between numpy, torch and devices without copying where possible (:func:`np_to_torch`,
:func:`torch_to_np`, :func:`to_device`).

The idea follows rlpyt (Stooke & Abbeel 2019, "rlpyt: A Research Code Base for Deep
Reinforcement Learning in PyTorch", arXiv:1909.01500); this is an independent implementation.
"""

from __future__ import annotations

import collections
import keyword
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

_RESERVED = ("get", "items")  # methods that a field of the same name would hide


class _NamedArrayTupleMethods:
    """Methods that every class returned by :func:`namedarraytuple` puts before its namedtuple base.

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500), ``namedarraytuple``.
    """

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        """Index every field with ``index``; return a new instance of the same class.

        Args:
            index: anything the fields accept: int, slice, ``...``, a tuple of these, a numpy or
                torch integer or bool array. ``x[:, j]`` of fields ``[T, B, ...]`` gives ``[T, ...]``.

        Returns:
            ``type(x)(f[index] for each field f)``; ``None`` fields stay ``None``, namedarraytuple
            fields recurse. Shapes and dtypes are whatever numpy/torch give for ``f[index]``
            (an int index on a 1-d numpy field gives a numpy scalar).

        Raises:
            TypeError: if ``index`` is a string (use ``x.name`` or ``x.get(name)`` for a field).
            IndexError, TypeError: from a field that rejects ``index``; the field's name is added
                to the exception as a note.
        """
        _check_not_name(self, index)
        return self._make(None if value is None else _on_field(name, lambda: value[index]) for name, value in self.items())

    def __setitem__(self, index: Any, value: Any) -> None:
        """Write ``value`` at ``index`` of every field, in place.

        If ``value`` has fields (a namedarraytuple, a namedtuple, or a mapping such as the dict
        observation of a gymnasium vector env) with the same names as ``x`` (in any order), each
        field is written from the one of the same name, ``x.f[index] = value.f``, skipping fields
        where either side is ``None`` and recursing into nested namedarraytuples. Anything else
        (scalar, array, tensor, plain tuple or list) is broadcast into every non-``None`` field:
        ``x.f[index] = value``. Numpy values written into torch fields are converted with
        ``torch.as_tensor(value, device=field.device)`` first (torch does not accept them); dtypes
        are cast to the field's dtype by numpy/torch as usual.

        Raises:
            TypeError: if ``index`` is a string (namedtuple fields cannot be reassigned).
            ValueError: if ``value`` has fields but not the same names; the message lists them.
            Errors of the fields (shape mismatch, ...), with the field's name added as a note.
        """
        _check_not_name(self, index)
        if isinstance(value, Mapping):
            source = value
        elif isinstance(value, tuple) and hasattr(value, "_fields"):
            source = dict(zip(value._fields, value))
        else:
            source = None
        if source is not None and set(source) != set(self._fields):
            missing, extra = sorted(set(self._fields) - set(source)), sorted(set(source) - set(self._fields))
            raise ValueError(
                f"cannot write a value with fields {list(source)} into {type(self).__name__} with "
                f"fields {list(self._fields)}: missing {missing}, unexpected {extra}"
            )
        for name, dst in self.items():
            src = value if source is None else source[name]
            if isinstance(dst, torch.Tensor) and isinstance(src, (np.ndarray, np.generic)):
                src = torch.as_tensor(src, device=dst.device)  # torch refuses numpy values in []=
            if dst is not None and src is not None:
                _on_field(name, lambda: dst.__setitem__(index, src))

    def get(self, name: str) -> Any:
        """The field called ``name`` (same as ``getattr(x, name)``).

        Raises:
            KeyError: if ``name`` is not a field; the message lists the fields.
        """
        if name not in self._fields:
            raise KeyError(f"{type(self).__name__} has no field {name!r}; fields are {list(self._fields)}")
        return getattr(self, name)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Yield ``(name, value)`` for every field, in field order."""
        return zip(self._fields, self)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a field name (not whether some array equals a field)."""
        return isinstance(name, str) and name in self._fields

    def __repr__(self) -> str:
        """``Name(field=ndarray[4, 3] float32, other=Tensor[4] int64, missing=None)``: shapes and dtypes only."""
        return f"{type(self).__name__}({', '.join(f'{name}={_describe(value)}' for name, value in self.items())})"

    def __reduce__(self) -> tuple:
        # Pickle by class reference when the class is importable (module-level name), like any class;
        # otherwise (classes made by example_from_space, or inside functions) by typename and fields.
        cls = type(self)
        found: Any = sys.modules.get(cls.__module__)
        for part in cls.__qualname__.split("."):
            found = getattr(found, part, None)
        if found is cls:
            return cls, tuple(self)
        return _rebuild, (cls.__name__, cls._fields, tuple(self))


def namedarraytuple(typename: str, field_names: Sequence[str] | str, *, module: str | None = None) -> type:
    """Create a namedtuple class whose ``[]`` indexes and assigns every field at once.

    Args:
        typename: the class name.
        field_names: field names, as a sequence or a string separated by spaces and/or commas
            (as for :func:`collections.namedtuple`).
        module: value of the class's ``__module__``; by default the caller's module, so that
            instances pickle by reference when the class is assigned to a module-level name
            of the same name. Other instances still pickle, by typename and fields.

    Returns:
        A subclass of ``collections.namedtuple(typename, field_names)``: attribute access,
        ``_fields``, ``_make``, ``_replace``, ``_asdict``, iteration over fields and unpacking work
        as usual. Fields may hold arrays/tensors of any shape and dtype, ``None``, or other
        namedarraytuples. In addition: ``x[index]``, ``x[index] = value``, ``x.get(name)``,
        ``x.items()``, ``name in x`` and a short ``repr`` (see :class:`_NamedArrayTupleMethods`).
        Equality and hashing are those of tuples, which numpy arrays do not support.

    Raises:
        ValueError: for names :func:`collections.namedtuple` rejects (not identifiers, keywords,
            leading underscore, duplicates) and for the field names ``get`` and ``items``.

    Source: rlpyt (Stooke & Abbeel 2019, "rlpyt: A Research Code Base for Deep Reinforcement
    Learning in PyTorch", arXiv:1909.01500).
    """
    if module is None:
        module = sys._getframe(1).f_globals.get("__name__", "__main__")
    base = collections.namedtuple(typename, field_names, module=module)
    reserved = [name for name in base._fields if name in _RESERVED]
    if reserved:
        raise ValueError(f"field names {reserved} of {typename} would hide the methods of the same name")
    doc = f"{typename}({', '.join(base._fields)}): a namedarraytuple; x[index] applies to every field."
    return type(typename, (_NamedArrayTupleMethods, base), {"__slots__": (), "__module__": module, "__doc__": doc})


def is_namedarraytuple(x: Any) -> bool:
    """Whether ``x`` is an instance of a class made by :func:`namedarraytuple` (classes give False).

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500).
    """
    return isinstance(x, _NamedArrayTupleMethods)


def buffer_from_example(example: Any, leading_dims: tuple[int, ...] | int, share_memory: bool = False) -> Any:
    """Allocate zeros shaped like ``example`` with extra leading dimensions, field by field.

    Args:
        example: one element: a numpy array or scalar, a python ``bool``/``int``/``float``, a torch
            tensor, ``None``, or a namedarraytuple of these (nested allowed).
        leading_dims: e.g. ``(T, B)`` or ``T``.
        share_memory: allocate every leaf as a CPU torch tensor in shared memory (``share_memory_()``).

    Returns:
        The same structure (namedarraytuples of the same classes, ``None`` kept) with each leaf
        replaced by zeros of shape ``leading_dims + shape(leaf)`` and the leaf's dtype: a numpy
        array for numpy leaves, a tensor on the leaf's device for torch leaves, and a numpy array
        of dtype ``np.asarray(leaf).dtype`` (e.g. int64, float64, bool) for python scalars.

        With ``share_memory=True``, torch leaves give shared tensors and numpy leaves give the
        numpy view (``tensor.numpy()``) of a shared tensor. Such numpy views are shared with
        processes *forked* after the allocation only: they cannot be sent to a *spawned*
        process. To hand storage to spawned processes, allocate from a torch example (e.g.
        ``np_to_torch(example)``): shared tensors pickle by handle through torch.multiprocessing,
        so passing them as ``Process`` arguments shares them; take numpy views in each process
        with :func:`torch_to_np`.

    Raises:
        TypeError: for a leaf of another type, and in shared mode for a numpy dtype torch has no
            equivalent of (object, strings, non-native byte order, ...).
        ValueError: in shared mode for a tensor not on the CPU.

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500), ``buffer_from_example``.
    """
    lead = (leading_dims,) if isinstance(leading_dims, int) else tuple(int(d) for d in leading_dims)

    def allocate(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            if not share_memory:
                return torch.zeros(lead + tuple(leaf.shape), dtype=leaf.dtype, device=leaf.device)
            if leaf.device.type != "cpu":
                raise ValueError(f"share_memory=True needs CPU tensors, got one on {leaf.device}")
            return shared_zeros(lead + tuple(leaf.shape), leaf.dtype)
        if not isinstance(leaf, (np.ndarray, np.generic, bool, int, float)):
            raise TypeError(
                f"cannot allocate a buffer from a {type(leaf).__name__}; expected a numpy array or "
                "scalar, a python bool/int/float, a torch tensor, None or a namedarraytuple"
            )
        array = np.asarray(leaf)
        if not share_memory:
            return np.zeros(lead + array.shape, dtype=array.dtype)
        try:
            dtype = torch.from_numpy(np.empty(0, dtype=array.dtype)).dtype
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"share_memory=True allocates torch tensors, and torch has no dtype for numpy {array.dtype}: {error}"
            ) from error
        return shared_zeros(lead + array.shape, dtype).numpy()

    return map_leaves(allocate, example)


def shared_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor of zeros in shared memory, built in place: its peak memory is its size once.

    ``torch.zeros(...).share_memory_()`` writes private zeros, then copies them into shared memory: twice the
    size. Here the private tensor is left uninitialised, so its pages are never touched (the copy reads them as
    the kernel's zero page), and the shared copy is zeroed where it lies.
    """
    return torch.empty(shape, dtype=dtype).share_memory_().zero_()


def np_to_torch(x: Any) -> Any:
    """Numpy arrays to torch tensors sharing their memory (``torch.from_numpy``), recursively.

    Args:
        x: a numpy array, a torch tensor (returned as is), a numpy or python scalar (copied into a
            0-d tensor: a scalar has no memory to share), ``None``, or a namedarraytuple of these.

    Returns:
        The same structure with tensors of the same shapes and corresponding dtypes (float32 ->
        torch.float32, ...) on the CPU; writes through either side are seen by the other.

    Raises:
        TypeError: for other leaf types, and for numpy dtypes torch lacks (e.g. object).
        ValueError: for arrays with non-native byte order.

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500), ``numpify_buffer``/``torchify_buffer``.
    """

    def convert(leaf: Any) -> torch.Tensor:
        if isinstance(leaf, torch.Tensor):
            return leaf
        if isinstance(leaf, np.ndarray):
            return torch.from_numpy(leaf)
        if isinstance(leaf, (np.generic, bool, int, float)):
            return torch.as_tensor(leaf)
        raise TypeError(f"np_to_torch expects numpy arrays, tensors, None or namedarraytuples, got {type(leaf).__name__}")

    return map_leaves(convert, x)


def torch_to_np(x: Any) -> Any:
    """CPU torch tensors to numpy arrays sharing their memory (``Tensor.numpy()``), recursively.

    Args:
        x: a CPU tensor (detached first: the array does not track gradients), a numpy array
            (returned as is), ``None``, or a namedarraytuple of these.

    Returns:
        The same structure with numpy arrays of the same shapes and corresponding dtypes;
        writes through either side are seen by the other.

    Raises:
        ValueError: for a tensor not on the CPU (move it with ``.cpu()`` or :func:`to_device` first).
        TypeError: for other leaf types, and for torch dtypes numpy lacks (e.g. bfloat16).

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500), ``numpify_buffer``.
    """

    def convert(leaf: Any) -> np.ndarray:
        if isinstance(leaf, np.ndarray):
            return leaf
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"torch_to_np expects tensors, numpy arrays, None or namedarraytuples, got {type(leaf).__name__}")
        if leaf.device.type != "cpu":
            raise ValueError(f"torch_to_np needs CPU tensors, got one on {leaf.device}; move it to the CPU first")
        return leaf.detach().numpy()

    return map_leaves(convert, x)


def to_device(x: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """``.to(device)`` on every tensor, recursively; numpy leaves go through :func:`np_to_torch` first.

    Args:
        x: tensors, numpy arrays or scalars, ``None``, or a namedarraytuple of these.
        device: e.g. ``"cuda"``, ``torch.device("cpu")``.
        non_blocking: passed to ``Tensor.to`` (asynchronous copies from pinned memory).

    Returns:
        The same structure of tensors on ``device``, shapes and dtypes unchanged. A leaf already on
        ``device`` is returned as is (no copy), as ``Tensor.to`` does.

    Raises:
        TypeError: as :func:`np_to_torch`, for leaves that are not arrays, tensors or scalars.

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500), ``to_device`` of its buffer utilities.
    """
    return map_leaves(lambda leaf: np_to_torch(leaf).to(device, non_blocking=non_blocking), x)


def conform(value: Any, template: Any) -> Any:
    """A gymnasium observation batch as the structure of ``template``, ready to write into it or to read like it.

    Args:
        value: an array, or the dict / tuple of arrays (nested) a vector env returns for Dict /
            Tuple spaces, or already a namedarraytuple.
        template: a buffer of the space (:func:`buffer_from_space`), numpy or torch.

    Returns:
        Dicts and tuples as the namedarraytuple classes of ``template`` (by key, by position),
        recursively; a numpy array whose template is a tensor as a tensor on its device; other
        values as they are. ``buffer[t] = conform(obs, buffer)`` then writes any observation.

    Raises:
        KeyError: a dict without one of the template's fields.
    """
    if isinstance(template, torch.Tensor) and isinstance(value, np.ndarray):
        return torch.as_tensor(value, device=template.device)
    if not is_namedarraytuple(template) or is_namedarraytuple(value):
        return value
    if isinstance(value, Mapping):
        return type(template)(**{name: conform(value[name], field) for name, field in template.items()})
    return type(template)(*(conform(item, field) for item, field in zip(value, template)))


def example_from_space(space: gym.spaces.Space) -> Any:
    """A zero numpy example of one element of a gymnasium space.

    Args:
        space: ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, or ``Dict``/``Tuple`` of these.

    Returns:
        - Box, MultiDiscrete, MultiBinary: ``np.zeros(space.shape, space.dtype)``.
        - Discrete: ``np.zeros((), space.dtype)`` (int64 in gymnasium).
        - Dict: an instance of a namedarraytuple class ``DictObservation`` whose fields are the keys in
          the space's order (gymnasium sorts them), with values built recursively. The class is
          cached: equal key sets give the same class. A dict observation ``obs`` (e.g. from a
          vector env) converts with ``type(example)(**obs)`` (per level, for nested dicts), and
          ``buffer[t] = obs`` writes it directly, nested dicts included.
        - Tuple: an instance of a namedarraytuple class ``TupleObservation`` with fields ``f0, f1, ...``;
          a tuple observation converts with ``type(example)(*obs)``.

    Raises:
        ValueError: for a Dict key that is not a valid field name (not a string, not an identifier,
            a keyword, starting with an underscore, or ``get``/``items``); the message names the key.
        TypeError: for other spaces (Text, Graph, Sequence, OneOf, ...), naming the space.

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500), which builds buffers from space samples.
    """
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Discrete)):
        return np.zeros(space.shape, dtype=space.dtype)  # Discrete has shape ()
    if isinstance(space, gym.spaces.Dict):
        for key in space.spaces:
            if (
                not (isinstance(key, str) and key.isidentifier())
                or keyword.iskeyword(key)
                or key.startswith("_")
                or key in _RESERVED
            ):
                raise ValueError(
                    f"Dict space key {key!r} cannot be a namedarraytuple field: keys must be Python "
                    f"identifiers, not keywords, not start with '_', and not be {list(_RESERVED)}"
                )
        cls = _cached_class("DictObservation", tuple(space.spaces))
        return cls(**{key: example_from_space(sub) for key, sub in space.spaces.items()})
    if isinstance(space, gym.spaces.Tuple):
        cls = _cached_class("TupleObservation", tuple(f"f{i}" for i in range(len(space.spaces))))
        return cls(*(example_from_space(sub) for sub in space.spaces))
    raise TypeError(f"example_from_space does not support {space!r} ({type(space).__name__})")


def buffer_from_space(space: gym.spaces.Space, leading_dims: tuple[int, ...] | int, share_memory: bool = False) -> Any:
    """Zeros ``[*leading_dims, *shape]`` for a space: ``buffer_from_example(example_from_space(space), ...)``.

    Raises:
        The errors of :func:`example_from_space` and :func:`buffer_from_example`.

    Source: rlpyt (Stooke & Abbeel 2019, arXiv:1909.01500).
    """
    return buffer_from_example(example_from_space(space), leading_dims, share_memory)


# ----------------------------------------------------------------------------- internals

_CLASSES: dict[tuple[str, tuple[str, ...]], type] = {}


def _cached_class(typename: str, fields: tuple[str, ...]) -> type:
    """The namedarraytuple class for (typename, fields), created once per process."""
    if (typename, fields) not in _CLASSES:
        _CLASSES[typename, fields] = namedarraytuple(typename, fields, module=__name__)
    return _CLASSES[typename, fields]


def _rebuild(typename: str, fields: tuple[str, ...], values: tuple) -> Any:
    """Unpickle an instance of a class that is not importable by name."""
    return _cached_class(typename, fields)._make(values)


def map_leaves(fn: Callable[[Any], Any], x: Any) -> Any:
    """``fn`` applied to every leaf of ``x``, the structure kept: namedarraytuples rebuilt, ``None`` kept.

    E.g. ``map_leaves(lambda t: t.flatten(0, 1), rollout)`` turns fields ``[T, B, ...]`` into
    ``[T * B, ...]``, nested namedarraytuples included.

    Args:
        fn: called on each leaf (an array, tensor or scalar).
        x: a leaf, ``None``, or a namedarraytuple (nested allowed).
    """
    if x is None:
        return None
    if is_namedarraytuple(x):
        return x._make(map_leaves(fn, value) for value in x)
    return fn(x)


def _check_not_name(x: Any, index: Any) -> None:
    if isinstance(index, str):
        raise TypeError(
            f"{type(x).__name__}[{index!r}]: indices apply to every field; read a field with x.{index} or x.get({index!r})"
        )


def _on_field(name: str, operation: Callable[[], Any]) -> Any:
    """Run ``operation``, adding the field name to any exception it raises."""
    try:
        return operation()
    except Exception as error:
        error.add_note(f"(in field {name!r} of a namedarraytuple)")
        raise


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"ndarray{list(value.shape)} {value.dtype}"
    if isinstance(value, torch.Tensor):
        device = "" if value.device.type == "cpu" else f" {value.device}"
        return f"Tensor{list(value.shape)} {str(value.dtype).removeprefix('torch.')}{device}"
    return repr(value)
