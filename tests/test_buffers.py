"""Replay buffers against hand-computed values: n-step windows, frame stacks, sum tree,
importance weights, sequences with burn-in, memory estimate, and the shared-memory mode: its lock
(a process SIGKILLed holding it is named, not waited for), the memory check's cgroup limits, the
build in place, nothing left in /dev/shm, and a capacity capped at what a run fills."""

import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import cleanrl_utils.buffers as buffers
from cleanrl_utils.buffers import (
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SequenceBuilder,
    SequenceReplayBuffer,
    SumTree,
    importance_weights,
    sequence_priority,
)
from cleanrl_utils.namedarraytuple import namedarraytuple

SCALAR_OBS = gym.spaces.Box(-1000, 1000, (1,), np.float32)
DISCRETE = gym.spaces.Discrete(4)


def one(x):
    return np.array([x])


def add_scalar_step(rb, obs, reward, terminated=False, truncated=False, final_obs=None):
    """One step of a single env whose observations are the numbers ``obs``."""
    next_obs = final_obs if final_obs is not None else -1.0  # -1: must not be read (next add gives it)
    rb.add(
        np.array([[obs]], np.float32), one(0), one(reward), one(terminated), one(truncated), np.array([[next_obs]], np.float32)
    )


def all_samples(rb, draws=4000, **kwargs):
    """{obs value: (window rewards, next obs, its steps m, window terminations, window truncations)} over many draws."""
    batch = rb.sample(draws, **kwargs)
    table = {}
    for i in range(draws):
        row = (
            tuple(batch.rewards[i].tolist()),
            batch.next_obs[i, 0].item(),
            batch.next_obs_steps[i].item(),
            tuple(batch.terminations[i].tolist()),
            tuple(batch.truncations[i].tolist()),
        )
        assert table.setdefault(batch.obs[i, 0].item(), row) == row
    return table


def test_n_step_windows_across_truncation_and_termination():
    rb = ReplayBuffer(16, 1, SCALAR_OBS, DISCRETE, n_step=3, seed=0)
    with pytest.raises(ValueError, match="no complete transition"):
        rb.sample(1)
    # episode A: obs 0..3, rewards 1..4, truncated after the 4th step with final obs 4
    for t in range(4):
        add_scalar_step(rb, t, t + 1, truncated=t == 3, final_obs=4.0 if t == 3 else None)
    # episode B: obs 10, 11, rewards 10, 20, terminated with final obs 12
    add_scalar_step(rb, 10, 10)
    add_scalar_step(rb, 11, 20, terminated=True, final_obs=12.0)
    # episode C: still running after 3 steps: no window is complete yet
    for t in range(3):
        add_scalar_step(rb, 20 + t, 1)
    assert len(rb) == 6
    none = (0.0, 0.0, 0.0)
    expected = {
        0.0: ((1.0, 2.0, 3.0), 3.0, 3, none, none),  # a whole window: s_3 three steps on
        1.0: ((2.0, 3.0, 4.0), 4.0, 3, none, (0.0, 0.0, 1.0)),  # truncated at the window's end: real final obs 4
        2.0: ((3.0, 4.0, 0.0), 4.0, 2, none, (0.0, 1.0, 0.0)),  # nothing of the next episode after the end
        3.0: ((4.0, 0.0, 0.0), 4.0, 1, none, (1.0, 0.0, 0.0)),
        10.0: ((10.0, 20.0, 0.0), 12.0, 2, (0.0, 1.0, 0.0), none),  # terminated: the final obs, flagged
        11.0: ((20.0, 0.0, 0.0), 12.0, 1, (1.0, 0.0, 0.0), none),
    }
    assert all_samples(rb) == expected
    add_scalar_step(rb, 23, 1)
    expected[20.0] = ((1.0, 1.0, 1.0), 23.0, 3, none, none)
    assert all_samples(rb) == expected


def test_one_step_buffer_and_uniform_sampling_over_envs():
    rb = ReplayBuffer(5, 2, SCALAR_OBS, DISCRETE, seed=0)
    for t in range(9):  # env 0 obs t, env 1 obs 100 + t, reward = obs; env 1's episodes end every 3 steps
        done = np.array([False, t % 3 == 2])
        rb.add(
            np.array([[t], [100 + t]], np.float32),
            np.array([1, 2]),
            np.array([t, 100 + t]),
            np.zeros(2),
            done,
            np.array([[-1], [1000 + t]], np.float32),
        )
    batch = rb.sample(20000)
    obs, next_obs = batch.obs[:, 0].numpy(), batch.next_obs[:, 0].numpy()
    values, counts = np.unique(obs, return_counts=True)
    # env 0: 5 rows, the newest (8) waits for its next obs and the ring kept 4..8 -> 4..7;
    # env 1 wrote 12 rows (3 final-obs rows): the ring holds 108, 1008 (final), 1005 (final), 106, 107
    assert values.tolist() == [4, 5, 6, 7, 106, 107, 108]
    assert counts.min() > 20000 / 7 * 0.9  # uniform
    np.testing.assert_array_equal(next_obs[obs == 5], 6)
    np.testing.assert_array_equal(next_obs[obs == 107], 108)
    np.testing.assert_array_equal(next_obs[obs == 108], 1008)  # truncated: the real final obs
    assert batch.rewards.shape == batch.truncations.shape == (20000, 1)  # one-step windows
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), obs)
    np.testing.assert_array_equal(batch.truncations[:, 0].numpy(), obs == 108)
    np.testing.assert_array_equal(batch.next_obs_steps.numpy(), 1)
    np.testing.assert_array_equal(batch.actions.numpy(), np.where(obs < 100, 1, 2))
    assert batch.weights is None


class StackingEnv:
    """Vector of envs whose frames are distinct numbers, stacked the way FrameStackObservation
    (padding_type="zero") does; records the true stacks to compare with the buffer's."""

    def __init__(self, num_envs, stack, rng):
        self.num_envs, self.stack, self.rng, self.counter = num_envs, stack, rng, 0
        self.frames = [deque([0] * stack, maxlen=stack) for _ in range(num_envs)]
        for e in range(num_envs):
            self._push(e)

    def _push(self, e):
        self.counter += 1
        self.frames[e].append(self.counter)

    def obs(self):
        return np.array([[np.full((2, 3), f) for f in d] for d in self.frames], dtype=np.int32)

    def step(self, end_prob):
        terminated = self.rng.random(self.num_envs) < end_prob
        truncated = ~terminated & (self.rng.random(self.num_envs) < end_prob)
        for e in range(self.num_envs):
            self._push(e)
        final = self.obs()
        for e in np.flatnonzero(terminated | truncated):
            self.frames[e] = deque([0] * self.stack, maxlen=self.stack)
            self._push(e)
        return terminated, truncated, final


def test_frame_stacks_rebuilt_at_episode_starts_and_ring_wraparound():
    rng = np.random.default_rng(0)
    stack, num_envs = 4, 3
    space = gym.spaces.Box(0, 1_000_000, (stack, 2, 3), np.int32)
    rb = ReplayBuffer(11, num_envs, space, DISCRETE, frame_stack=stack, seed=1)
    assert rb.observations.shape == (11, num_envs, 2, 3)  # one frame per row
    env = StackingEnv(num_envs, stack, rng)
    truth = {}  # slot -> (obs stack, next obs stack), as the env produced them
    sampled = 0
    for step in range(300):
        obs = env.obs()
        rows = rb.pos.copy()
        terminated, truncated, final = env.step(end_prob=0.12)
        rb.add(obs, np.zeros(num_envs, np.int64), np.zeros(num_envs), terminated, truncated, final)
        for e in range(num_envs):
            truth[rows[e] * num_envs + e] = (obs[e, :, 0, 0], final[e, :, 0, 0])
        if step >= 1:
            batch = rb.sample(64)
            for i, slot in enumerate(batch.indices.tolist()):
                expected_obs, expected_next = truth[slot]
                np.testing.assert_array_equal(batch.obs[i, :, 0, 0].numpy(), expected_obs)
                np.testing.assert_array_equal(batch.next_obs[i, :, 0, 0].numpy(), expected_next)
                assert (batch.obs[i] == batch.obs[i, :, :1, :1]).all()  # whole frames, not mixed
            sampled += 64
    assert rb.written.max() > 5 * 11  # wrapped around the ring several times
    # stacks starting an episode carry zeros: some sampled stacks had them
    batch = rb.sample(2000)
    assert (batch.obs[:, 0, 0, 0] == 0).any() and (batch.obs[:, 0, 0, 0] != 0).any()


def test_frame_stack_hand_computed_episode_start_and_unwritten_slots():
    space = gym.spaces.Box(0, 255, (3, 1), np.uint8)
    rb = ReplayBuffer(8, 1, space, DISCRETE, frame_stack=3, seed=0)
    stacks = [[0, 0, 1], [0, 1, 2], [1, 2, 3]]  # one episode: frames 1, 2, 3 then truncated with frame 4
    rb.add(np.array([stacks[0]], np.uint8)[..., None], one(0), one(0), one(False), one(False), None)
    with pytest.raises(ValueError):  # the first transition's next obs is not written yet
        rb.sample(1)
    rb.add(np.array([stacks[1]], np.uint8)[..., None], one(0), one(0), one(False), one(False), None)
    batch = rb.sample(100)
    assert batch.obs[:, :, 0].tolist() == [[0, 0, 1]] * 100 and batch.next_obs[:, :, 0].tolist() == [[0, 1, 2]] * 100
    rb.add(
        np.array([stacks[2]], np.uint8)[..., None],
        one(0),
        one(0),
        one(False),
        one(True),
        np.array([[2, 3, 4]], np.uint8)[..., None],
    )
    # next episode starts with frame 9: its stack must not show frames 3, 4 of the last one
    rb.add(np.array([[0, 0, 9]], np.uint8)[..., None], one(0), one(0), one(False), one(False), None)
    rb.add(np.array([[0, 9, 10]], np.uint8)[..., None], one(0), one(0), one(False), one(False), None)
    batch = rb.sample(500)
    got = {tuple(o[:, 0].tolist()): tuple(n[:, 0].tolist()) for o, n in zip(batch.obs, batch.next_obs)}
    assert got == {(0, 0, 1): (0, 1, 2), (0, 1, 2): (1, 2, 3), (1, 2, 3): (2, 3, 4), (0, 0, 9): (0, 9, 10)}


def test_atari_million_transitions_fit_in_7_5_gb(monkeypatch):
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    monkeypatch.setattr(buffers, "memory_limits", lambda shared=False: {"the machine's memory": int(7.5e9)})
    rb = ReplayBuffer(1_000_000, 1, space, DISCRETE, frame_stack=4)  # numpy allocates lazily: no pages touched
    assert rb.nbytes <= 7.5e9
    naive = 2 * 1_000_000 * 4 * 84 * 84
    assert naive > 56e9
    del rb
    monkeypatch.setattr(buffers, "memory_limits", lambda shared=False: {"the machine's memory": 2**30})
    with pytest.raises(
        MemoryError, match=r"needs 6\.\d+ GiB but only 1\.00 GiB is available, by the machine's memory"
    ) as error:
        ReplayBuffer(1_000_000, 1, space, DISCRETE, frame_stack=4)
    assert "\n" not in str(error.value)


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(3, 1, SCALAR_OBS, DISCRETE, n_step=3)
    with pytest.raises(ValueError, match="frame_stack"):
        ReplayBuffer(10, 1, SCALAR_OBS, DISCRETE, frame_stack=4)
    with pytest.raises(ValueError, match="beta"):
        buffer = PrioritizedReplayBuffer(10, 1, SCALAR_OBS, DISCRETE)
        add_scalar_step(buffer, 1, 1, terminated=True, final_obs=2.0)
        buffer.sample(1, beta=1.5)


def test_dict_observations_are_stored_as_namedarraytuples():
    space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (2, 2), np.uint8), "vector": gym.spaces.Box(-1, 1, (3,), np.float32)}
    )
    rb = ReplayBuffer(6, 2, space, DISCRETE, seed=0)
    obs_cls = type(rb.observations)
    for t in range(3):
        obs = obs_cls(image=np.full((2, 2, 2), t, np.uint8), vector=np.full((2, 3), t / 10, np.float32))
        rb.add(obs, np.array([t, t]), np.array([1.0, 1.0]), np.zeros(2), np.zeros(2), obs)
    batch = rb.sample(50)
    assert batch.obs.image.shape == (50, 2, 2) and batch.obs.vector.dtype == torch.float32
    np.testing.assert_allclose(batch.next_obs.vector[:, 0].numpy(), (batch.obs.image[:, 0, 0].numpy() + 1) / 10, rtol=1e-6)


def test_sum_tree_sampling_frequencies_chi_square():
    tree = SumTree(6)
    priorities = np.array([1.0, 2.0, 3.0, 4.0, 0.0, 10.0])
    tree.update(np.arange(6), priorities)
    assert tree.total == 20.0 and tree.leaf_offset == 8
    rng = np.random.default_rng(0)
    draws = np.concatenate([tree.stratified_sample(32, rng) for _ in range(3000)])
    counts = np.bincount(draws, minlength=6)
    assert counts[4] == 0  # priority 0: never sampled
    expected = priorities / priorities.sum() * len(draws)
    keep = expected > 0
    chi2 = (((counts - expected)[keep]) ** 2 / expected[keep]).sum()
    assert chi2 < 18.47  # chi-square, 4 degrees of freedom, p = 0.001
    # stratified: each of the 32 segments of one batch gives exactly one draw
    batch = tree.stratified_sample(20, np.random.default_rng(1))
    assert np.bincount(batch, minlength=6).tolist() == [1, 2, 3, 4, 0, 10]


def test_sum_tree_updates_with_repeats_keep_sums_exact():
    tree = SumTree(1000)
    rng = np.random.default_rng(0)
    values = np.zeros(1000)
    for _ in range(50):
        idx = rng.integers(0, 1000, size=64)
        new = rng.random(64)
        tree.update(idx, new)
        values[idx] = new  # numpy keeps the last of repeated indices, as the tree does
    np.testing.assert_allclose(tree[np.arange(1000)], values)
    assert tree.total == pytest.approx(values.sum(), rel=1e-12)
    # internal nodes are the sums of their children
    t = tree.tree
    np.testing.assert_allclose(t[1 : tree.leaf_offset], t[2 : 2 * tree.leaf_offset : 2] + t[3 : 2 * tree.leaf_offset : 2])
    # find: the prefix-sum boundaries
    cumulative = np.cumsum(values)
    u = rng.random(500) * values.sum()
    np.testing.assert_array_equal(tree.find(u), np.searchsorted(cumulative, u, side="right"))


def test_importance_weights_hand_computed():
    p = np.array([0.5, 0.25, 0.125])
    w = importance_weights(p, num_stored=8, beta=0.5)
    # (8 * .5)^-.5 = .5, (8 * .25)^-.5 = .7071, (8 * .125)^-.5 = 1 -> divided by the max 1
    np.testing.assert_allclose(w, [0.5, 2**-0.5, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(importance_weights(p, 8, 0.0), [1, 1, 1])


def test_prioritized_buffer_probabilities_weights_and_updates():
    rb = PrioritizedReplayBuffer(16, 1, SCALAR_OBS, DISCRETE, alpha=0.5, eps=1e-6, seed=0)
    for t in range(4):  # four transitions, obs 0..3, one episode terminated at the end
        add_scalar_step(rb, t, 0, terminated=t == 3, final_obs=4.0)
    assert len(rb) == 4
    batch = rb.sample(8, beta=0.4)  # new transitions share the largest priority: uniform, weights 1
    np.testing.assert_allclose(batch.weights.numpy(), 1.0)
    slots = np.array([rb.sample(1).indices.item() for _ in range(50)] + list(batch.indices.numpy()))
    slot_of = {}
    for s in np.unique(slots):
        slot_of[int(rb.observations.reshape(-1)[s])] = s
    td = {0: 1.0, 1: 4.0, 2: 9.0, 3: 0.25}  # |δ|; p^α = (|δ| + ε)^0.5 ≈ 1, 2, 3, 0.5
    rb.update_priorities(np.array([slot_of[k] for k in td]), np.array(list(td.values())))
    batch = rb.sample(60000, beta=1.0)
    obs, weights = batch.obs[:, 0].numpy().astype(int), batch.weights.numpy()
    freq = np.bincount(obs, minlength=4) / len(obs)
    p = np.array([1.0, 2.0, 3.0, 0.5]) / 6.5
    np.testing.assert_allclose(freq, p, atol=0.005)
    # w = (N P)^-β / max over the batch, N = 4 stored
    expected = (4 * p[obs]) ** -1.0
    np.testing.assert_allclose(weights, expected / expected.max(), rtol=1e-4)
    # with β = 1 the weighted mean under P is the uniform mean: (1 + 2 + 3 + 4) / 4
    f = obs + 1.0
    assert (weights * f).sum() / weights.sum() == pytest.approx(2.5, rel=0.02)
    # a new transition takes the largest priority so far (9 + ε)
    add_scalar_step(rb, 7, 0, terminated=True, final_obs=8.0)
    new_slot = int(np.flatnonzero(rb.observations.reshape(-1) == 7)[0])
    assert rb.tree[np.array([new_slot])][0] == pytest.approx(9.0**0.5)
    # a stale update (the slot was rewritten since sampling) is skipped
    versions = rb.versions.reshape(-1)[[new_slot]].copy()
    rb.versions.reshape(-1)[new_slot] += 1
    rb.update_priorities(np.array([new_slot]), np.array([100.0]), versions)
    assert rb.tree[np.array([new_slot])][0] == pytest.approx(9.0**0.5)


def test_prioritized_sampling_never_returns_incomplete_slots():
    rb = PrioritizedReplayBuffer(12, 2, SCALAR_OBS, DISCRETE, n_step=3, seed=0)
    rng = np.random.default_rng(0)
    for t in range(40):
        done = rng.random(2) < 0.2
        rb.add(np.array([[t], [t]], np.float32), np.zeros(2, np.int64), np.ones(2), done, np.zeros(2), np.zeros((2, 1)))
        if len(rb):
            batch = rb.sample(32, beta=0.5)
            assert rb.valid.reshape(-1)[batch.indices.numpy()].all()
            rb.update_priorities(batch.indices, rng.random(32))
    valid_total = rb.tree[np.flatnonzero(rb.valid.reshape(-1))].sum()
    assert rb.tree.total == pytest.approx(valid_total)  # invalid slots hold priority 0


StateHC = namedarraytuple("StateHC", ["h", "c"])


def make_builder(num_envs=1):
    return SequenceBuilder(
        num_envs,
        burn_in=2,
        learn_length=2,
        observation_space=SCALAR_OBS,
        action_space=DISCRETE,
        state_example=StateHC(np.zeros(3, np.float32), np.zeros(3, np.float32)),
    )


def feed_episode(builder, first_obs, length, truncated=False, state_offset=0.0):
    """One env, observations first_obs + i, the recurrent state before step i = state_offset + i."""
    out = []
    for i in range(length):
        end = i == length - 1
        state = StateHC(np.full((1, 3), state_offset + i, np.float32), np.full((1, 3), -(state_offset + i), np.float32))
        seqs = builder.add(
            np.array([[first_obs + i]], np.float32),
            one(i % 4),
            one(float(i)),
            one(end and not truncated),
            one(end and truncated),
            np.array([[first_obs + i + 1]], np.float32),
            state,
        )
        if seqs is not None:
            out.extend(seqs[j] for j in range(len(seqs.rewards)))
    return out


def test_sequence_builder_burn_in_boundaries_and_padding():
    builder = make_builder()
    seqs = feed_episode(builder, 0, 7, state_offset=100.0)  # steps 0..6, T = 4, starts 0, 2, 4
    assert [s.obs[0, 0].item() for s in seqs] == [0, 2, 4]
    full0, full2, end4 = seqs
    assert full0.obs[:, 0].tolist() == [0, 1, 2, 3, 4] and full0.learn_mask.all() and full0.starts_episode
    assert (full0.states.h == 0).all()  # episode start: zero state, whatever the actor passed
    assert full2.learn_mask.tolist() == [False, False, True, True]  # burn-in steps 2, 3; learns 4, 5
    np.testing.assert_array_equal(full2.states.h, 102.0)  # the state before step 2
    np.testing.assert_array_equal(full2.states.c, -102.0)
    assert end4.mask.tolist() == [True, True, True, False]  # steps 4, 5, 6 then padding
    assert end4.learn_mask.tolist() == [False, False, True, False]  # learns step 6 only
    assert end4.obs[:, 0].tolist() == [4, 5, 6, 7, 0]  # 7: the real final obs after step 6
    assert end4.terminations.tolist() == [False, False, True, False]
    # each step of the episode is learned exactly once
    learned = np.concatenate([s.obs[:-1, 0][s.learn_mask] for s in seqs])
    assert sorted(learned.tolist()) == list(range(7))
    # a new episode starts afresh: no state or steps leak from the last one
    seqs = feed_episode(builder, 50, 3, truncated=True, state_offset=200.0)
    assert len(seqs) == 1 and seqs[0].obs[:, 0].tolist() == [50, 51, 52, 53, 0]
    assert (seqs[0].states.h == 0).all() and seqs[0].truncations.tolist() == [False, False, True, False]


def test_sequence_builder_skips_sequences_with_nothing_to_learn():
    builder = make_builder()
    seqs = feed_episode(builder, 0, 5)  # starts 0 (full, steps 0..3), 2 (steps 2..4, learns 4); 4: burn-in only
    assert [s.obs[0, 0].item() for s in seqs] == [0, 2]


def test_sequence_priority_hand_computed():
    delta = np.array([[1.0, 3.0, 2.0, 100.0], [0.5, 0.5, 0.5, 0.5]])
    mask = np.array([[True, True, True, False], [False, False, False, False]])
    # 0.9 * 3 + 0.1 * 2 = 2.9; an empty mask gives 0
    np.testing.assert_allclose(sequence_priority(delta, mask, eta=0.9), [2.9, 0.0])


def test_sequence_replay_samples_by_priority():
    builder = make_builder()
    rb = SequenceReplayBuffer(8, builder, alpha=1.0, seed=0)
    seqs = feed_episode(builder, 0, 7)
    rb.add(buffers._stack_all(seqs), priorities=np.array([1.0, 2.0, 5.0]))
    batch = rb.sample(8000, beta=1.0)
    freq = np.bincount(batch.indices.numpy(), minlength=3) / 8000
    np.testing.assert_allclose(freq, [1 / 8, 2 / 8, 5 / 8], atol=0.02)
    assert batch.states.h.shape == (8000, 3) and batch.obs.shape == (8000, 5, 1)
    first = batch.indices == 0
    assert (batch.obs[first, 0, 0] == 0).all() and (batch.obs[batch.indices == 2, 0, 0] == 4).all()
    # w ∝ (N P)^-1: the least likely sequence has weight 1, the most likely (1/8) / (5/8)
    np.testing.assert_allclose(batch.weights[batch.indices == 0].numpy(), 1.0)
    np.testing.assert_allclose(batch.weights[batch.indices == 2].numpy(), 0.2, rtol=1e-5)
    rb.update_priorities(np.array([2]), sequence_priority(np.array([[0.0, 0.0, 1.0, 0.0]]), np.ones((1, 4), bool)))
    assert rb.tree[np.array([2])][0] == pytest.approx(0.9 + 0.1 * 0.25 + 1e-6)


# ---- shared memory: module-level functions so that spawned processes can import them


def _actor_adds_transitions(rb, start, steps):
    for t in range(start, start + steps):
        add_scalar_step(rb, t, float(t), terminated=t % 5 == 4, final_obs=float(t) + 0.5)


def _actor_adds_sequences(rb, actor, count):
    builder = make_builder()
    for k in range(count):
        seqs = feed_episode(builder, 100_000 * actor + 10 * k, 5)
        rb.add(buffers._stack_all(seqs))


def test_shared_prioritized_buffer_actor_process_and_learner():
    ctx = mp.get_context("spawn")
    rb = PrioritizedReplayBuffer(4096, 1, SCALAR_OBS, DISCRETE, n_step=2, seed=0, shared=True)
    actor = ctx.Process(target=_actor_adds_transitions, args=(rb, 0, 2000))
    actor.start()
    learner_steps = 0
    while actor.is_alive() or learner_steps == 0:  # the learner samples while the actor writes
        if len(rb) > 0:
            batch = rb.sample(32, beta=0.5)
            obs = batch.obs[:, 0].numpy()
            # windows r_t, r_{t+1}, cut where the episode ended at t
            expected = np.where(obs % 5 == 4, 0, obs + 1)
            np.testing.assert_allclose(batch.rewards.numpy(), np.stack([obs, expected], 1))
            rb.update_priorities(batch.indices, np.abs(obs) + 1)
            learner_steps += 1
    actor.join(timeout=60)
    assert actor.exitcode == 0 and learner_steps > 0
    assert len(rb) == 2000  # every transition the actor wrote is visible here
    assert rb.max_priority[0] > 1.0  # the learner's updates landed in shared memory


def test_shared_sequence_buffer_two_writers_never_tear_sequences():
    ctx = mp.get_context("spawn")
    rb = SequenceReplayBuffer(4000, make_builder(), shared=True, seed=0)
    writers = [ctx.Process(target=_actor_adds_sequences, args=(rb, a, 150)) for a in (1, 2)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=120)
        assert w.exitcode == 0
    assert len(rb) == 2 * 150 * 2  # each 5-step episode gives 2 sequences (starts 0 and 2)
    obs = rb.data.obs[: len(rb), :, 0]
    mask = rb.data.mask[: len(rb)]
    # within a sequence the observations are consecutive: no interleaving of two writers
    steps = np.diff(obs[:, :3], axis=1)
    assert (steps[mask[:, 1:3]] == 1).all()
    owners = obs[:, 0] // 100_000
    assert sorted(np.bincount(owners.astype(int))[1:].tolist()) == [300, 300]


class DictCounter(gym.Env):
    """Dict observations {"pos": [t, t], "parts": (t % 5, [t])}, time limit set by TimeLimit."""

    observation_space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1, 1000, (2,), np.float32),
            "parts": gym.spaces.Tuple((gym.spaces.Discrete(5), gym.spaces.Box(-1, 1000, (1,), np.float32))),
        }
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return {"pos": np.full(2, self.t, np.float32), "parts": (self.t % 5, np.full(1, self.t, np.float32))}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, False, False, {}


def test_dict_observations_from_a_vector_env_with_real_final_obs():
    from cleanrl_utils.wrappers import SAME_STEP, real_next_obs

    thunks = [lambda: gym.wrappers.TimeLimit(DictCounter(), 3), lambda: gym.wrappers.TimeLimit(DictCounter(), 2)]
    envs = gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)
    rb = ReplayBuffer(10, 2, envs.single_observation_space, envs.single_action_space, seed=0)
    obs, _ = envs.reset(seed=0)
    for _ in range(6):
        next_obs, rewards, terminations, truncations, infos = envs.step(np.zeros(2, np.int64))
        real = real_next_obs(next_obs, infos)
        if truncations.any():  # the final observation, not the reset one, in every field
            i = int(np.flatnonzero(truncations)[0])
            assert real["pos"][i, 0] == real["parts"][1][i, 0] == [3, 2][i] and next_obs["pos"][i, 0] == 0
        rb.add(obs, np.zeros(2, np.int64), rewards, terminations, truncations, real)  # the raw dict, as is
        obs = next_obs
    batch = rb.sample(500)
    t, next_t = batch.obs.pos[:, 0], batch.next_obs.pos[:, 0]
    np.testing.assert_array_equal(next_t.numpy(), t.numpy() + 1)  # incl. the truncated steps t = 2 and 1
    np.testing.assert_array_equal(batch.obs.parts.f0.numpy(), t.numpy() % 5)
    time_limit = np.where(batch.indices.numpy() % 2 == 0, 3, 2)  # env 0's episodes last 3 steps, env 1's 2
    np.testing.assert_array_equal(batch.truncations[:, 0].numpy(), next_t.numpy() == time_limit)
    envs.close()


def test_bad_calls_raise_clear_errors():
    rb = PrioritizedReplayBuffer(10, 2, SCALAR_OBS, DISCRETE)
    with pytest.raises(ValueError, match="num_envs=2"):
        rb.add(np.zeros((3, 1)), np.zeros(3), np.zeros(3), np.zeros(3), np.zeros(3), np.zeros((3, 1)))
    rb.add(np.zeros((2, 1)), np.zeros(2), np.zeros(2), np.ones(2), np.zeros(2), np.zeros((2, 1)))
    batch = rb.sample(4)
    with pytest.raises(ValueError, match="finite"):
        rb.update_priorities(batch.indices, torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    assert np.isfinite(rb.tree.total)
    stacked = ReplayBuffer(10, 1, gym.spaces.Box(0, 255, (2, 3), np.uint8), DISCRETE, frame_stack=2)
    with pytest.raises(ValueError, match="zero-padded"):  # e.g. FrameStackObservation's default "reset" padding
        stacked.add(np.ones((1, 2, 3), np.uint8), one(0), one(0), one(False), one(False), None)


@pytest.mark.parametrize("prioritized", [False, True])
def test_state_dict_round_trip_continues_sampling_exactly(prioritized, tmp_path):
    """A buffer saved with state_dict (through torch.save / weights_only load) and loaded into a
    fresh one samples the same batches, priorities and importance weights as the original."""
    cls = buffers.PrioritizedReplayBuffer if prioritized else buffers.ReplayBuffer
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    make = lambda seed: cls(12, 2, space, gym.spaces.Discrete(3), n_step=2, seed=seed)  # noqa: E731
    original, rng = make(0), np.random.default_rng(1)
    obs = rng.random((2, 3), dtype=np.float32)
    for _ in range(30):  # wraps the ring of 12 rows twice
        next_obs = rng.random((2, 3), dtype=np.float32)
        original.add(
            obs, rng.integers(0, 3, 2), rng.random(2, dtype=np.float32), rng.random(2) < 0.15, np.zeros(2, bool), next_obs
        )
        obs = next_obs
    if prioritized:
        batch = original.sample(6)
        original.update_priorities(batch.indices, rng.random(6) + 0.1)
    torch.save(original.state_dict(), tmp_path / "buffer.pt")
    restored = make(seed=99)  # another sampling seed: the saved generator must replace it
    restored.load_state_dict(torch.load(tmp_path / "buffer.pt", weights_only=True))
    assert len(restored) == len(original) > 0
    for _ in range(3):
        expected, got = original.sample(5), restored.sample(5)
        for field, a, b in zip(expected._fields, expected, got):
            if a is not None:
                assert torch.equal(a, b), field
    with pytest.raises(ValueError, match="observations"):  # another capacity is refused, naming the array
        cls(13, 2, space, gym.spaces.Discrete(3), n_step=2).load_state_dict(original.state_dict())


def sample_the_newest_row(arrays: dict) -> None:
    """Mark the newest row of env 0 sampleable (its episode goes on: its n-step window is not complete)."""
    newest = (int(arrays["pos"][0]) - 1) % arrays["valid"].shape[0]
    assert arrays["episode_rows"][0] > 0 and not arrays["valid"][newest, 0]
    arrays["valid"][newest, 0] = True
    arrays["counts"] += 1


def sample_a_final_observation(arrays: dict) -> None:
    """Mark sampleable, in env 0, a row that holds the final observation of an episode (the row after its end)."""
    ended = (arrays["terminations"] | arrays["truncations"])[:, 0]
    final = int(torch.nonzero(torch.roll(ended, 1)).flatten()[0])
    assert not arrays["valid"][final, 0]
    arrays["valid"][final, 0] = True
    arrays["counts"] += 1


@pytest.mark.parametrize(
    "forge, message",
    [
        (lambda a: a["pos"].fill_(12), "pos outside"),
        (lambda a: a["episode_rows"].fill_(-1), "episode_rows outside"),
        (lambda a: a["actions"].__setitem__((0, 0), 7), "an action outside Discrete"),
        (lambda a: a["rewards"].__setitem__((0, 0), float("inf")), "non-finite reward"),
        (lambda a: a["counts"].add_(1), "rows are valid"),
        (lambda a: a["tree_storage"].__setitem__(-1, -1.0), "negative or non-finite priority"),
        (lambda a: a["valid"].zero_().__setitem__((0, 0), True) or a["counts"].fill_(1), "cannot be sampled"),
        (lambda a: a["observations"].__setitem__((3, 1), float("nan")), "a non-finite observation"),
        (sample_the_newest_row, "a sampleable row in env 0 whose n-step window or frame stack is not complete"),
        (lambda a: sample_the_newest_row(a) or a["episode_rows"].__setitem__(0, 0), "has no rows, yet its last row"),
        (lambda a: a["episode_rows"].__setitem__(0, 2), "env 0's current episode does not start 2 rows back"),
        (sample_a_final_observation, "a sampleable row that holds an episode's final observation"),
    ],
)
def test_forged_buffer_values_are_refused_on_load(forge, message):
    """Values no add() could have written (a checkpoint edited by hand) stop the load with a
    ValueError naming them, rather than an index error at the first add or sample."""
    space = gym.spaces.Box(-1, 1, (1,), np.float32)
    rb = PrioritizedReplayBuffer(12, 2, space, gym.spaces.Discrete(3), n_step=2, seed=0)
    for t in range(20):
        obs = np.full((2, 1), t, np.float32)
        rb.add(obs, np.array([1, 2]), np.ones(2), np.array([t % 7 == 6] * 2), np.zeros(2), obs + 0.5)
    state = rb.state_dict()
    state["arrays"] = {name: value.clone() for name, value in state["arrays"].items()}
    forge(state["arrays"])
    with pytest.raises(ValueError, match=message):
        PrioritizedReplayBuffer(12, 2, space, gym.spaces.Discrete(3), n_step=2, seed=0).load_state_dict(state)


# ---- a process that dies holding a shared buffer's lock (module-level functions: spawned processes import them)


def _dies_holding_the_lock(rb, held=None, go=None):
    """Take the buffer's lock, then die by SIGKILL while holding it (as the OOM killer may), after ``go`` if given."""
    rb._lock.acquire()
    if held is not None:
        held.set()
        go.wait(60)
    os.kill(os.getpid(), signal.SIGKILL)


def _updates_priorities(rb, said):
    """An actor's ``update_priorities`` (it waits for the lock); puts what stopped it on ``said``."""
    try:
        rb.update_priorities(np.array([0]), np.array([1.0]))
        said.put("no error")
    except buffers.LockHolderDied as error:
        said.put(str(error))


def shared_buffers():
    return {
        "prioritized": PrioritizedReplayBuffer(64, 1, SCALAR_OBS, DISCRETE, n_step=2, seed=0, shared=True),
        "sequences": SequenceReplayBuffer(16, make_builder(), shared=True, seed=0),
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["prioritized", "sequences"])
def test_a_process_killed_holding_the_lock_is_named_by_the_next_one_not_waited_for(kind):
    """An actor SIGKILLed inside the lock: the learner's next sample does not block (the kernel released the lock) but
    stops with one line naming the dead process, and so does every later call (the buffer may be half written)."""
    rb = shared_buffers()[kind]
    if kind == "prioritized":
        _actor_adds_transitions(rb, 0, 10)
    else:
        _actor_adds_sequences(rb, 0, 2)
    holder = mp.get_context("spawn").Process(target=_dies_holding_the_lock, args=(rb,))
    holder.start()
    holder.join(30)
    assert holder.exitcode == -signal.SIGKILL
    dead = rf"process {holder.pid} \({holder.name}\) died while it held the replay buffer's lock; [^\n]*"
    for _ in range(2):
        with pytest.raises(Exception) as error:  # before the fix: no exception, a wait for ever
            rb.sample(4)
        assert type(error.value).__name__ == "LockHolderDied" and re.fullmatch(dead, str(error.value)), error.value


@pytest.mark.timeout(60)
def test_a_process_waiting_for_the_lock_is_released_when_its_holder_is_killed():
    """The learner SIGKILLed while it holds the lock and an actor waits in ``update_priorities``: the actor stops at
    once with the line naming the learner, instead of waiting for ever as an orphan."""
    context = mp.get_context("spawn")
    rb = shared_buffers()["prioritized"]
    held, go, said = context.Event(), context.Event(), context.SimpleQueue()
    holder = context.Process(target=_dies_holding_the_lock, args=(rb, held, go), name="learner")
    holder.start()
    assert held.wait(30)
    waiter = context.Process(target=_updates_priorities, args=(rb, said))
    waiter.start()
    try:
        time.sleep(1.0)  # the waiter is blocked on the lock
        assert waiter.is_alive()
        go.set()
        waiter.join(30)
        holder.join(30)
    finally:
        if waiter.is_alive():  # an orphan waiting for ever
            waiter.kill()
    assert waiter.exitcode == 0 and holder.exitcode == -signal.SIGKILL
    assert re.fullmatch(rf"process {holder.pid} \(learner\) died while it held the replay buffer's lock.*", said.get())


def _counts_under_the_lock(rb, rounds):
    for _ in range(rounds):
        with rb._lock:
            value = int(rb.counts[0])
            time.sleep(0.0005)
            rb.counts[0] = value + 1


def test_the_lock_keeps_threads_and_forked_processes_apart():
    """Read-modify-writes of one shared counter under the lock, from two threads of this process and from a forked
    child (which opens its own description of the lock's file): none is lost."""
    rb = shared_buffers()["prioritized"]
    child = mp.get_context("fork").Process(target=_counts_under_the_lock, args=(rb, 200))
    child.start()
    threads = [threading.Thread(target=_counts_under_the_lock, args=(rb, 200)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    child.join(60)
    assert child.exitcode == 0 and int(rb.counts[0]) == 600


# ---- memory: the cgroup's limit, shared buffers built in place, a capacity that holds the whole run


def fake_cgroups(root, monkeypatch, version, limit=512 * 2**20, used=2**20):
    """A cgroup tree under ``root`` where this process is in ``/job/step`` and ``/job`` has a ``limit``; v1 as a
    container sees it: its own cgroup is the mount's root, so the path /proc names is not under it."""
    if version == 2:
        proc, folder = "0::/job/step\n", root / "job"
        (folder / "step").mkdir(parents=True)
        (folder / "step" / "memory.max").write_text("max\n")
        (folder / "step" / "memory.current").write_text(f"{used}\n")
        (folder / "memory.max").write_text(f"{limit}\n")
        (folder / "memory.current").write_text(f"{used + 4096}\n")
        (folder / "memory.stat").write_text(f"anon {used}\ninactive_file 4096\n")
    else:
        proc, folder = "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/\n", root / "memory"
        folder.mkdir(parents=True)
        (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (folder / "memory.usage_in_bytes").write_text(f"{used}\n")
        (folder / "memory.stat").write_text("cache 0\ntotal_inactive_file 0\n")
    (root / "cgroup").write_text(proc)
    monkeypatch.setattr(buffers, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(buffers, "PROC_CGROUP", str(root / "cgroup"))


@pytest.mark.parametrize("version", [1, 2])
def test_the_memory_check_reads_the_cgroup_limit(version, tmp_path, monkeypatch):
    """In a 512 MiB cgroup (1 MiB in use) a 700 MiB replay is refused in one line that names the limit, though the
    machine has the memory; a 100 MiB one is built (numpy allocates lazily: nothing is touched)."""
    fake_cgroups(tmp_path, monkeypatch, version)
    limits = buffers.memory_limits()
    where = "/job" if version == 2 else "/"
    assert limits[f"the memory limit of cgroup {where} (0.50 GiB, 1.0 MiB of it in use)"] == 511 * 2**20
    frames = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    refused = rf"needs 0\.6\d GiB but only 0\.50 GiB is available, by the memory limit of cgroup {where} \(0\.50 GiB, 1\.0 MiB"
    with pytest.raises(MemoryError, match=refused) as error:
        ReplayBuffer(104_000, 1, frames, DISCRETE, frame_stack=4)
    assert "\n" not in str(error.value)
    assert ReplayBuffer(14_000, 1, frames, DISCRETE, frame_stack=4).nbytes < 100 * 2**20


def test_no_cgroup_limit_bounds_nothing(tmp_path, monkeypatch):
    fake_cgroups(tmp_path, monkeypatch, 2, limit="max")
    assert not [name for name in buffers.memory_limits() if "cgroup" in name]
    monkeypatch.setattr(buffers, "PROC_CGROUP", str(tmp_path / "missing"))
    assert not [name for name in buffers.memory_limits() if "cgroup" in name]


PEAK = """
import gymnasium as gym, numpy as np
from cleanrl_utils.buffers import ReplayBuffer
def status(field):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(field + ":"))
space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
ReplayBuffer(10, 1, space, gym.spaces.Discrete(4), shared=True)  # what the first one loads
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) starts again from here, not from the imports'
    f.write("5")
rb = ReplayBuffer(256 * 2**20 // (84 * 84), 1, space, gym.spaces.Discrete(4), shared=True)
built = status("VmRSS") - before
rb.observations.fill(1)
print(rb.nbytes, built, status("VmHWM") - before)
"""


def test_a_shared_buffer_is_built_in_place():
    """A 256 MiB shared replay takes no memory until it is written (pages of zeros), and its peak is its size once
    when it is full: not twice its size at the start, as when zeros were written in private memory and copied into
    shared memory (the process's resident memory now, then its peak since the build began, against its resident memory
    before). The peak is the kernel's VmHWM, reset just before the build: the process's lifetime peak (ru_maxrss) can
    be set by its imports, above the memory it holds when the build begins."""
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    result = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, env=environ, timeout=120)
    assert result.returncode == 0, result.stderr
    nbytes, built, written = map(int, result.stdout.split())
    print(f"replay {nbytes / 2**20:.1f} MiB: memory up {built / 2**20:.1f} MiB built, peak up {written / 2**20:.1f} MiB full")
    assert nbytes >= 256 * 2**20 * 0.99 and built <= 0.1 * nbytes and written <= 1.1 * nbytes


HOLDS = """
import time, gymnasium as gym, numpy as np
from cleanrl_utils.buffers import PrioritizedReplayBuffer, SequenceReplayBuffer
from tests.test_buffers import make_builder
frames = gym.spaces.Box(0, 255, (84, 84), np.uint8)
rb = PrioritizedReplayBuffer(20_000, 2, frames, gym.spaces.Discrete(4), n_step=3, shared=True)
rb.observations.fill(1)
sequences = SequenceReplayBuffer(100, make_builder(), shared=True)
print("ready", flush=True)
time.sleep(600)
"""


def test_nothing_of_a_shared_buffer_outlives_its_process_group():
    """A process holding two shared buffers (one filled) maps no file of /dev/shm (torch's shared tensors were named
    there a moment, the lock was a named semaphore there), so SIGKILL to its whole process group, resource tracker
    and all, leaves nothing there: their memory goes with the process."""
    root, before = Path(__file__).resolve().parent.parent, set(os.listdir("/dev/shm"))
    process = subprocess.Popen([sys.executable, "-c", HOLDS], stdout=subprocess.PIPE, text=True, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": str(root)}, cwd=root)  # fmt: skip
    try:
        assert process.stdout.readline() == "ready\n"
        maps = Path(f"/proc/{process.pid}/maps").read_text()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    named = {line.split("/dev/shm/", 1)[1].split()[0] for line in maps.splitlines() if "/dev/shm/" in line}
    time.sleep(0.5)
    left = {name for name in set(os.listdir("/dev/shm")) - before if name in named or f"_{process.pid}_" in name}
    assert not named and not left, (named, left)


NO_ROOM = """
import os, resource, sys, gymnasium as gym, numpy as np
from cleanrl_utils.buffers import ReplayBuffer
size = 256 * 2**20
space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
ReplayBuffer(10, 1, space, gym.spaces.Discrete(4), shared=True)  # what the first one loads
mapped = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
room = mapped + int(float(sys.argv[1]) * size)
resource.setrlimit(resource.RLIMIT_AS, (room, room))  # as ulimit -v: address space for that much more
try:
    print(ReplayBuffer(size // (84 * 84), 1, space, gym.spaces.Discrete(4), shared=True).nbytes)
except MemoryError as error:
    print(error)
print([name for name in os.listdir("/dev/shm") if name.startswith(f"torch_{os.getpid()}_")])
"""


@pytest.mark.parametrize("room", [1.5, 0.5])
def test_a_shared_buffer_that_cannot_be_mapped_is_refused_in_one_line_and_leaves_nothing(room):
    """With address space for 1.5 times its size (``ulimit -v``), a 256 MiB shared replay is built (it was not: its
    private zeros took one share, and the shared copy that could not be mapped left a 256 MiB torch_* file in
    /dev/shm); with half its size, a MemoryError says so in one line, and nothing is left in /dev/shm either."""
    environ = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    result = subprocess.run([sys.executable, "-c", NO_ROOM, str(room)], capture_output=True, text=True, env=environ)
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) == 2 and lines[1] == "[]", (result.stdout, result.stderr[-2000:])
    if room > 1:
        assert int(lines[0]) > 256 * 2**20
    else:
        assert lines[0].startswith("ReplayBuffer needs 0.25 GiB of shared memory, which this process cannot map")


def random_episodes(rng, steps, num_envs, builder=None):
    """``steps`` vector steps of ``num_envs`` envs with episodes of 1 to 6 steps (to a buffer's ``add``), or the
    sequences ``builder`` cuts from them."""
    t = np.zeros(num_envs)
    for _ in range(steps):
        ended = rng.random(num_envs) < 0.3
        truncated = ended & (rng.random(num_envs) < 0.5)
        obs = t[:, None].astype(np.float32)
        step = (obs, rng.integers(4, size=num_envs), rng.standard_normal(num_envs), ended & ~truncated, truncated, obs + 0.5)
        t = np.where(ended, 0, t + 1)
        if builder is None:
            yield step
        else:
            states = StateHC(rng.standard_normal((num_envs, 3), np.float32), rng.standard_normal((num_envs, 3), np.float32))
            sequences = builder.add(*step, states)
            if sequences is not None:
                yield sequences


def assert_same(one, other):
    """Two batches (namedarraytuples of tensors, nested, or None) are equal, bit for bit."""
    if one is None or not hasattr(one, "_fields"):
        torch.testing.assert_close(one, other, rtol=0, atol=0)
        return
    for name in one._fields:
        assert_same(getattr(one, name), getattr(other, name))


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "sequences"])
def test_a_buffer_that_holds_every_step_samples_as_a_larger_one(kind):
    """Capped at what the run can fill (``rows_to_hold``; a sequence per step at most), a replay draws the very
    batches a 10x larger one draws with the same seed, priority updates included: the rows beyond are never used."""
    steps, num_envs = 300, 3
    if kind == "sequences":
        make = lambda capacity: SequenceReplayBuffer(capacity, make_builder(num_envs), seed=1)  # noqa: E731
        small, large = make(steps * num_envs), make(10 * steps * num_envs)
        episodes = random_episodes(np.random.default_rng(0), steps, num_envs, make_builder(num_envs))
    else:
        space = gym.spaces.Box(-1, 1000, (4, 1), np.float32)
        kind_of = PrioritizedReplayBuffer if kind == "prioritized" else ReplayBuffer
        make = lambda capacity: kind_of(capacity, num_envs, space, DISCRETE, n_step=3, frame_stack=4, seed=1)  # noqa: E731
        small, large = make(buffers.rows_to_hold(steps, 3, 4)), make(10 * buffers.rows_to_hold(steps, 3, 4))
        episodes = ((np.repeat(obs[:, None], 4, 1) * (np.arange(4) == 3)[:, None], *rest[:-1],
                     np.repeat(rest[-1][:, None], 4, 1)) for obs, *rest in random_episodes(np.random.default_rng(0), steps,
                                                                                           num_envs))  # fmt: skip
    for k, step in enumerate(episodes):
        for rb in (small, large):
            rb.add(step) if kind == "sequences" else rb.add(*step)
        if k % 50 == 49 and len(small):
            batches = [rb.sample(64) for rb in (small, large)]
            assert_same(*batches)
            if kind != "uniform":
                priorities = batches[0].rewards.abs().reshape(64, -1).sum(1)
                for rb, batch in zip((small, large), batches):
                    rb.update_priorities(batch.indices, priorities)
    assert len(small) == len(large) > 0
