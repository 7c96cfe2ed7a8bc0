"""Tests of cleanrl_utils.namedarraytuple: indexing, assignment, buffers, shared memory, spaces."""

from __future__ import annotations

import collections
import copy
import multiprocessing
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl_utils.namedarraytuple import (
    buffer_from_example,
    buffer_from_space,
    example_from_space,
    is_namedarraytuple,
    namedarraytuple,
    np_to_torch,
    to_device,
    torch_to_np,
)

# Module level, so that instances pickle by reference and spawned children can import them.
Inner = namedarraytuple("Inner", ["a", "b"])
Samples = namedarraytuple("Samples", "obs act extra inner")


def make_samples(T: int = 4, B: int = 3) -> Samples:
    """obs numpy float32 [T, B, 2], act torch int64 [T, B], extra None, inner: a numpy [T, B], b torch [T, B, 5]."""
    obs = np.arange(T * B * 2, dtype=np.float32).reshape(T, B, 2)
    act = torch.arange(T * B).reshape(T, B)
    b = torch.arange(T * B * 5, dtype=torch.float32).reshape(T, B, 5)
    inner = Inner(a=np.arange(T * B).reshape(T, B) * 10, b=b)
    return Samples(obs=obs, act=act, extra=None, inner=inner)


def _fork_child(buf: np.ndarray) -> None:
    buf[2] = 5.0


def _spawn_child(buf: Samples) -> None:
    view = torch_to_np(buf)  # numpy views of the shared tensors, taken in the child
    view.obs[1] = 3.5
    view.inner.a[:, 0] = 7
    buf.act[2] = 9  # and through the tensor itself


# ----------------------------------------------------------------------------- class basics


def test_namedtuple_behaviour():
    x = make_samples()
    assert is_namedarraytuple(x) and is_namedarraytuple(x.inner)
    assert not is_namedarraytuple(tuple(x)) and not is_namedarraytuple(Samples)
    assert not is_namedarraytuple(collections.namedtuple("P", "a")(1))
    assert Samples._fields == ("obs", "act", "extra", "inner") and len(x) == 4
    obs, act, extra, inner = x
    assert obs is x.obs and act is x.act and extra is None and inner is x.inner
    assert x.get("act") is x.act and list(x._asdict()) == list(Samples._fields)
    assert [name for name, _ in x.items()] == list(Samples._fields)
    assert x._replace(extra=1).extra == 1 and type(x._replace(extra=1)) is Samples
    assert "obs" in x and "nope" not in x and np.zeros(2) not in x
    assert isinstance(x, tuple) and Samples.__module__ == __name__
    with pytest.raises(KeyError, match="nope"):
        x.get("nope")


def test_invalid_field_names():
    with pytest.raises(ValueError):
        namedarraytuple("Bad", ["ok", "_private"])
    with pytest.raises(ValueError, match="get"):
        namedarraytuple("Bad", ["get", "x"])


def test_repr_shows_shapes_and_dtypes():
    text = repr(make_samples())
    assert text == (
        "Samples(obs=ndarray[4, 3, 2] float32, act=Tensor[4, 3] int64, extra=None, "
        "inner=Inner(a=ndarray[4, 3] int64, b=Tensor[4, 3, 5] float32))"
    )


# ----------------------------------------------------------------------------- indexing


def test_getitem_int_and_slice():
    x = make_samples()
    row = x[2]
    assert type(row) is Samples and type(row.inner) is Inner and row.extra is None
    np.testing.assert_array_equal(row.obs, x.obs[2])
    assert torch.equal(row.act, torch.tensor([6, 7, 8]))
    np.testing.assert_array_equal(row.inner.a, [60, 70, 80])
    assert row.inner.b.shape == (3, 5)
    part = x[1:3]
    assert part.obs.shape == (2, 3, 2) and part.act.shape == (2, 3) and part.inner.b.shape == (2, 3, 5)
    part.obs[0, 0, 0] = -1.0  # slices are views
    assert x.obs[1, 0, 0] == -1.0


def test_getitem_column_and_ellipsis():
    x = make_samples()
    col = x[:, 1]
    assert col.obs.shape == (4, 2) and col.act.shape == (4,) and col.inner.b.shape == (4, 5)
    assert torch.equal(col.act, torch.tensor([1, 4, 7, 10]))
    np.testing.assert_array_equal(col.inner.a, [10, 40, 70, 100])
    assert x[..., 0].obs.shape == (4, 3) and x[..., 0].act.shape == (4,)


@pytest.mark.parametrize("index", [np.array([3, 0]), torch.tensor([3, 0])])
def test_getitem_index_arrays(index):
    x = make_samples()
    picked = x[index]
    np.testing.assert_array_equal(picked.obs, x.obs[[3, 0]])
    assert torch.equal(picked.act, torch.stack([x.act[3], x.act[0]]))
    np.testing.assert_array_equal(picked.inner.a[:, 0], [90, 0])


@pytest.mark.parametrize("mask", [np.array([True, False, False, True]), torch.tensor([True, False, False, True])])
def test_getitem_bool_mask(mask):
    x = make_samples()
    picked = x[mask]
    assert picked.obs.shape == (2, 3, 2) and picked.act.shape == (2, 3)
    assert torch.equal(picked.act[:, 0], torch.tensor([0, 9]))
    np.testing.assert_array_equal(picked.inner.a[:, 1], [10, 100])


def test_string_index_is_an_error():
    x = make_samples()
    with pytest.raises(TypeError, match=r"x\.obs"):
        x["obs"]
    with pytest.raises(TypeError, match="get"):
        x["obs"] = 0


def test_bad_index_names_the_field():
    x = make_samples()
    with pytest.raises(IndexError) as info:
        x[10]
    assert any("'obs'" in note for note in info.value.__notes__)


# ----------------------------------------------------------------------------- assignment


def test_setitem_field_by_field():
    x = make_samples()
    step = Samples(
        obs=np.full((3, 2), -2.0, np.float32),
        act=torch.full((3,), 42),
        extra=np.ones(3),
        inner=Inner(a=np.array([1, 2, 3]), b=None),
    )
    x[1] = step
    np.testing.assert_array_equal(x.obs[1], -2.0)
    assert torch.equal(x.act[1], torch.full((3,), 42)) and x.extra is None
    np.testing.assert_array_equal(x.inner.a[1], [1, 2, 3])
    assert torch.equal(x.inner.b[1], torch.arange(15, 30, dtype=torch.float32).reshape(3, 5))  # b=None skipped
    np.testing.assert_array_equal(x.obs[0, 0], [0.0, 1.0])  # other rows untouched


def test_setitem_from_plain_namedtuple_and_dict():
    Pair = collections.namedtuple("Pair", "b a")  # same names, other order
    x = Inner(a=np.zeros((2, 3)), b=torch.zeros(2, 3))
    x[0] = Pair(b=torch.ones(3), a=np.full(3, 2.0))
    x[1] = {"a": 5.0, "b": np.full(3, 6.0)}  # numpy float64 into a torch float32 field
    np.testing.assert_array_equal(x.a, [[2, 2, 2], [5, 5, 5]])
    assert torch.equal(x.b, torch.tensor([[1.0] * 3, [6.0] * 3]))


def test_setitem_broadcast():
    x = make_samples()
    x[:, 2] = 0
    np.testing.assert_array_equal(x.obs[:, 2], 0.0)
    assert (x.act[:, 2] == 0).all() and (x.inner.b[:, 2] == 0).all()
    np.testing.assert_array_equal(x.inner.a[:, 2], 0)
    assert x.act[0, 1] == 1 and x.obs[0, 1, 0] == 2.0  # untouched
    x[3] = np.float32(8)  # numpy scalar into numpy and torch fields
    assert (x.act[3] == 8).all() and (x.inner.b[3] == 8).all() and (x.obs[3] == 8).all()


def test_setitem_mask_and_index_array():
    x = make_samples()
    x[np.array([True, False, True, False])] = -1
    assert torch.equal(x.act[:, 0], torch.tensor([-1, 3, -1, 9]))
    x[torch.tensor([1])] = Samples(
        obs=np.zeros((1, 3, 2), np.float32),
        act=torch.zeros(1, 3, dtype=torch.int64),
        extra=None,
        inner=Inner(a=np.zeros((1, 3), np.int64), b=torch.zeros(1, 3, 5)),
    )
    assert torch.equal(x.act[:, 0], torch.tensor([-1, 0, -1, 9]))
    np.testing.assert_array_equal(x.inner.a[1], 0)


def test_setitem_mismatched_fields():
    x = make_samples()
    with pytest.raises(ValueError, match=r"missing \['inner'\].*unexpected \['other'\]"):
        x[0] = collections.namedtuple("Other", "obs act extra other")(1, 2, 3, 4)
    with pytest.raises(ValueError, match="missing"):
        x.inner[0] = {"a": 1}


# ----------------------------------------------------------------------------- buffers


def test_buffer_from_example_numpy_torch_scalars_nested():
    example = Samples(
        obs=np.zeros((2, 7), np.uint8), act=torch.zeros((), dtype=torch.int32), extra=None, inner=Inner(a=1.5, b=True)
    )
    buf = buffer_from_example(example, (5, 3))
    assert type(buf) is Samples and type(buf.inner) is Inner and buf.extra is None
    assert isinstance(buf.obs, np.ndarray) and buf.obs.shape == (5, 3, 2, 7) and buf.obs.dtype == np.uint8
    assert isinstance(buf.act, torch.Tensor) and buf.act.shape == (5, 3) and buf.act.dtype == torch.int32
    assert buf.inner.a.shape == (5, 3) and buf.inner.a.dtype == np.float64
    assert buf.inner.b.dtype == np.bool_ and not buf.inner.b.any()
    assert not buf.obs.any() and not buf.act.any()
    one = buffer_from_example(np.int64(3), 4)
    assert one.shape == (4,) and one.dtype == np.int64 and not one.any()
    assert buffer_from_example(7, ()).shape == () and buffer_from_example(None, 3) is None
    with pytest.raises(TypeError, match="str"):
        buffer_from_example("text", 3)


def test_buffer_share_memory():
    example = Inner(a=np.zeros(3, np.float32), b=torch.zeros(2, dtype=torch.int64))
    buf = buffer_from_example(example, 4, share_memory=True)
    assert isinstance(buf.a, np.ndarray) and buf.a.shape == (4, 3) and buf.a.dtype == np.float32
    assert isinstance(buf.a.base, torch.Tensor) and buf.a.base.is_shared()
    assert buf.b.is_shared() and buf.b.shape == (4, 2)
    with pytest.raises(TypeError, match="object"):
        buffer_from_example(np.empty(2, dtype=object), 3, share_memory=True)
    assert buffer_from_example(np.empty(2, dtype=object), 3).dtype == object  # fine without sharing


def test_forked_child_writes_numpy_shared_buffer():
    buf = buffer_from_example(np.zeros((), np.float32), 4, share_memory=True)
    process = multiprocessing.get_context("fork").Process(target=_fork_child, args=(buf,))
    process.start()
    process.join(timeout=30)
    assert process.exitcode == 0
    np.testing.assert_array_equal(buf, [0.0, 0.0, 5.0, 0.0])


def test_spawned_child_writes_torch_shared_buffer():
    example = Samples(
        obs=torch.zeros(2),
        act=torch.zeros((), dtype=torch.int64),
        extra=None,
        inner=Inner(a=torch.zeros(3, dtype=torch.int32), b=None),
    )
    buf = buffer_from_example(example, 4, share_memory=True)
    process = multiprocessing.get_context("spawn").Process(target=_spawn_child, args=(buf,))
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0
    assert torch.equal(buf.obs, torch.tensor([[0.0, 0.0], [3.5, 3.5], [0.0, 0.0], [0.0, 0.0]]))
    assert torch.equal(buf.act, torch.tensor([0, 0, 9, 0]))
    assert torch.equal(buf.inner.a[:, 0], torch.full((4,), 7, dtype=torch.int32)) and not buf.inner.a[:, 1:].any()


# ----------------------------------------------------------------------------- conversions


def test_np_to_torch_and_back_share_memory():
    x = Inner(a=np.zeros((2, 3), np.float32), b=None)
    t = np_to_torch(x)
    assert type(t) is Inner and isinstance(t.a, torch.Tensor) and t.a.dtype == torch.float32 and t.b is None
    t.a[1, 2] = 4.0
    assert x.a[1, 2] == 4.0
    n = torch_to_np(t)
    assert isinstance(n.a, np.ndarray) and n.a.dtype == np.float32
    n.a[0, 0] = -1.0
    assert t.a[0, 0] == -1.0 and x.a[0, 0] == -1.0
    grad = torch.zeros(2, requires_grad=True)
    assert torch_to_np(grad).shape == (2,)
    assert np_to_torch(np.float32(2.0)).dtype == torch.float32


def test_torch_to_np_rejects_other_devices():
    with pytest.raises(ValueError, match="CPU"):
        torch_to_np(torch.zeros(2, device="meta"))
    with pytest.raises(TypeError):
        torch_to_np([1, 2])


def test_to_device():
    x = Samples(obs=np.ones((2, 3), np.float32), act=torch.arange(2), extra=None, inner=Inner(a=np.int64(5), b=None))
    moved = to_device(x, "meta")
    assert type(moved) is Samples and moved.extra is None and moved.inner.b is None
    assert moved.obs.device.type == "meta" and moved.obs.shape == (2, 3) and moved.obs.dtype == torch.float32
    assert moved.act.device.type == "meta" and moved.inner.a.device.type == "meta"
    on_cpu = to_device(x, torch.device("cpu"))
    on_cpu.obs[0, 0] = 9.0  # numpy -> torch on the same device does not copy
    assert x.obs[0, 0] == 9.0 and on_cpu.act is x.act


# ----------------------------------------------------------------------------- spaces


def test_example_from_simple_spaces():
    box = example_from_space(gym.spaces.Box(-1, 1, (3, 2), np.float32))
    assert box.shape == (3, 2) and box.dtype == np.float32 and not box.any()
    discrete = example_from_space(gym.spaces.Discrete(5))
    assert discrete.shape == () and discrete.dtype == np.int64
    multi = example_from_space(gym.spaces.MultiDiscrete([2, 3, 4]))
    assert multi.shape == (3,) and multi.dtype == np.int64
    binary = example_from_space(gym.spaces.MultiBinary(6))
    assert binary.shape == (6,) and binary.dtype == np.int8
    with pytest.raises(TypeError, match="Text"):
        example_from_space(gym.spaces.Text(5))


def test_example_and_buffer_from_dict_space():
    space = gym.spaces.Dict(
        {"vector": gym.spaces.Box(-1, 1, (5,), np.float32), "image": gym.spaces.Box(0, 255, (3, 8, 8), np.uint8)}
    )
    example = example_from_space(space)
    assert is_namedarraytuple(example) and type(example).__name__ == "DictObservation"
    assert example._fields == tuple(space.spaces) == ("image", "vector")
    assert example.image.shape == (3, 8, 8) and example.image.dtype == np.uint8
    assert example.vector.shape == (5,) and example.vector.dtype == np.float32
    assert type(example_from_space(space)) is type(example)  # cached class

    buf = buffer_from_space(space, (6, 2))
    assert buf.image.shape == (6, 2, 3, 8, 8) and buf.image.dtype == np.uint8 and buf.vector.shape == (6, 2, 5)
    obs = {"image": np.full((2, 3, 8, 8), 200, np.uint8), "vector": np.ones((2, 5), np.float32)}  # vector-env dict
    buf[4] = type(buf)(**obs)
    buf[5] = obs
    assert (buf.image[4:] == 200).all() and (buf.vector[4:] == 1.0).all() and not buf.image[:4].any()

    shared = buffer_from_space(space, 3, share_memory=True)
    assert shared.image.base.is_shared() and shared.image.shape == (3, 3, 8, 8)


def test_nested_dict_and_tuple_spaces():
    space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0, 1, (2,), np.float64))),
            "sub": gym.spaces.Dict({"flag": gym.spaces.MultiBinary(2)}),
        }
    )
    example = example_from_space(space)
    assert example._fields == ("pos", "sub")
    assert type(example.pos).__name__ == "TupleObservation" and example.pos._fields == ("f0", "f1")
    assert example.pos.f0.dtype == np.int64 and example.pos.f1.shape == (2,) and example.sub.flag.dtype == np.int8
    buf = buffer_from_space(space, 4)
    assert buf.pos.f0.shape == (4,) and buf.pos.f1.shape == (4, 2) and buf.sub.flag.shape == (4, 2)
    TupleObservation = type(buf.pos)  # a plain tuple would be broadcast: convert tuple observations
    buf[1] = {"pos": TupleObservation(np.int64(2), np.array([0.5, 0.25])), "sub": {"flag": np.array([1, 0])}}
    assert buf.pos.f0.tolist() == [0, 2, 0, 0] and buf.pos.f1[1].tolist() == [0.5, 0.25]
    assert buf.sub.flag[1].tolist() == [1, 0]


def test_bad_dict_keys():
    with pytest.raises(ValueError, match="'my-key'"):
        example_from_space(gym.spaces.Dict({"my-key": gym.spaces.Discrete(2)}))
    with pytest.raises(ValueError, match="'_hidden'"):
        example_from_space(gym.spaces.Dict({"_hidden": gym.spaces.Discrete(2)}))


# ----------------------------------------------------------------------------- pickling


def test_pickle_round_trip():
    x = make_samples()
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is Samples and type(y.inner) is Inner and y.extra is None
    np.testing.assert_array_equal(y.obs, x.obs)
    assert torch.equal(y.inner.b, x.inner.b)
    z = copy.deepcopy(x)
    z.obs[0, 0, 0] = 100.0
    assert x.obs[0, 0, 0] == 0.0


def test_pickle_classes_not_importable_by_name():
    space = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Box(0, 1, (2,))})
    buf = buffer_from_space(space, 3)
    buf.b[1] = 0.5
    y = pickle.loads(pickle.dumps(buf))
    assert type(y) is type(buf) and y.b[1].tolist() == [0.5, 0.5]
    Local = namedarraytuple("Local", "p q")  # not a module-level name
    z = pickle.loads(pickle.dumps(Local(p=np.arange(3), q=None)))
    assert is_namedarraytuple(z) and z._fields == ("p", "q") and z.p.tolist() == [0, 1, 2] and z.q is None
