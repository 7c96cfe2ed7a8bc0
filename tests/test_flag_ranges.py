"""Flags out of their meaningful range: refused in one line that names the flag the user gave, exit 2, before any
run directory exists (``assert_stops_with_one_line``).

Every case here was accepted, or refused under another flag's name, before the scripts' ``check_args`` bounded it:
loss coefficients below 0, a non-positive --target-kl, a prioritized-replay α above 1, and sizes so large that a
product of them (the rollout, the replay per env) was refused first under a derived name (``dqn.py --num-envs
10**20`` named --buffer-size). Each case stops at argument checking, in this process for all scripts but
``ddp_ppo.py`` and ``r2d2_async.py`` (a subprocess each)."""

import pytest

from tests.conftest import assert_stops_with_one_line, run_script

HUGE = str(10**20)
"""``1e20`` as tyro reads an int flag: written out (the literal ``1e20`` is not an int; see the last test)"""
INT64ISH = str(2**62)

CASES = [
    # a2c: loss coefficients, the rollout's sizes
    ("a2c.py", ["--vf-coef", "-1"], "--vf-coef", "must be >= 0, got -1.0"),
    ("a2c.py", ["--ent-coef", "-0.01"], "--ent-coef", "must be >= 0, got -0.01"),
    ("a2c.py", ["--num-envs", HUGE], "--num-envs", f"must be in [1, 65536], got {HUGE}"),
    # the PPO variants: loss coefficients, --target-kl, the rollout's sizes (each before their product)
    ("ppo.py", ["--vf-coef", "-1"], "--vf-coef", "must be >= 0, got -1.0"),
    ("ppo.py", ["--ent-coef", "-0.01"], "--ent-coef", "must be >= 0, got -0.01"),
    ("ppo.py", ["--target-kl", "-1"], "--target-kl", "must be positive, got -1.0"),
    ("ppo.py", ["--num-envs", HUGE], "--num-envs", f"must be in [1, 65536], got {HUGE}"),
    ("ppo.py", ["--num-steps", INT64ISH], "--num-steps", f"must be in [1, 1048576], got {INT64ISH}"),
    ("ppo.py", ["--total-timesteps", "100"], "--total-timesteps", "512 steps (--num-envs 4 x --num-steps 128)"),
    ("ppo.py", ["--update-epochs", HUGE], "--update-epochs", f"must be in [1, 10000], got {HUGE}"),
    ("pqn.py", ["--update-epochs", "10001"], "--update-epochs", "must be in [1, 10000], got 10001"),
    ("ppo_continuous.py", ["--update-epochs", "10001"], "--update-epochs", "must be in [1, 10000]"),
    ("ppo_atari.py", ["--vf-coef", "-1"], "--vf-coef", "must be >= 0"),
    ("ppo_atari.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("ppo_atari_envpool.py", ["--ent-coef", "-1"], "--ent-coef", "must be >= 0"),
    ("ppo_atari_envpool.py", ["--num-threads", INT64ISH], "--num-threads", "must be in [1, 1024]"),
    ("ppo_procgen.py", ["--vf-coef", "-1"], "--vf-coef", "must be >= 0"),
    ("ppo_procgen.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("ppo_procgen.py", ["--num-levels", HUGE], "--num-levels", "must be in [0, 2147483647]"),
    ("ppo_rnd_envpool.py", ["--num-iterations-obs-norm-init", HUGE], "--num-iterations-obs-norm-init", "[1, 1000000]"),
    ("ppo_rnd_envpool.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("ppg_procgen.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("ppg_procgen.py", ["--n-iteration", INT64ISH], "--n-iteration", "must be in [1, 65536]"),
    ("ppg_procgen.py", ["--e-auxiliary", "10001"], "--e-auxiliary", "must be in [1, 10000]"),
    ("ppg_procgen.py", ["--ent-coef", "-1"], "--ent-coef", "must be >= 0"),
    ("ppg_procgen.py", ["--target-kl", "0"], "--target-kl", "must be positive"),
    ("ppo_pettingzoo.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 4096]"),
    ("ppo_pettingzoo.py", ["--gae-lambda", "1.5"], "--gae-lambda", "must be in [0, 1]"),
    ("ppo_atari_lstm.py", ["--ent-coef", "-1"], "--ent-coef", "must be >= 0"),
    ("ppo_atari_lstm.py", ["--target-kl", "0"], "--target-kl", "must be positive"),
    ("ppo_continuous.py", ["--vf-coef", "-0.5"], "--vf-coef", "must be >= 0"),
    ("ppo_continuous.py", ["--num-steps", HUGE], "--num-steps", "must be in [1, 1048576]"),
    # RPO's α: in action units, not negative, finite (beyond 1e6 the scored log-densities overflow float32)
    ("rpo_continuous.py", ["--rpo-alpha", "-0.5"], "--rpo-alpha", "must be in [0, 1e6], got -0.5"),
    ("rpo_continuous.py", ["--rpo-alpha", "inf"], "--rpo-alpha", "must be finite, got inf"),
    ("rpo_continuous.py", ["--rpo-alpha", "1e300"], "--rpo-alpha", "must be in [0, 1e6], got 1e+300"),
    ("rpo_continuous.py", ["--update-epochs", "10001"], "--update-epochs", "must be in [1, 10000]"),
    ("ppo_lstm.py", ["--target-kl", "0"], "--target-kl", "must be positive"),
    ("ppo_lstm.py", ["--lstm-size", INT64ISH], "--lstm-size", "must be in [1, 65536]"),
    ("ppo_continuous_lstm.py", ["--lstm-size", INT64ISH], "--lstm-size", "must be in [1, 65536]"),
    ("ppo_trxl.py", ["--trxl-dim", INT64ISH], "--trxl-dim", "must be in [2, 16384]"),
    ("ppo_trxl.py", ["--trxl-memory-length", HUGE], "--trxl-memory-length", "must be in [1, 16384]"),
    ("ppo_trxl.py", ["--num-envs", HUGE], "--num-envs", f"must be in [1, 65536], got {HUGE}"),
    ("ppo_trxl.py", ["--ent-coef", "-1"], "--ent-coef", "must be >= 0"),
    ("ppo_trxl.py", ["--target-kl", "0"], "--target-kl", "must be positive"),
    ("ppo_continuous_lstm.py", ["--num-envs", HUGE], "--num-envs", f"must be in [1, 65536], got {HUGE}"),
    ("ppo_continuous_lstm.py", ["--vf-coef", "-0.5"], "--vf-coef", "must be >= 0"),
    ("ppo_continuous_lstm.py", ["--target-kl", "0"], "--target-kl", "must be positive"),
    ("ppo_continuous_lstm.py", ["--update-epochs", "10001"], "--update-epochs", "must be in [1, 10000]"),
    ("ppo_structured.py", ["--vf-coef", "-1"], "--vf-coef", "must be >= 0"),
    ("ppo_structured.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("ddp_ppo.py", ["--env-id", "CartPole-v1", "--vf-coef", "-1"], "--vf-coef", "must be >= 0"),
    # DQN, C51, Rainbow: the replay's sizes (each before their quotient), PER's α, the support
    ("dqn.py", ["--num-envs", HUGE], "--num-envs", f"must be in [1, 65536], got {HUGE}"),
    ("dqn.py", ["--batch-size", HUGE], "--batch-size", "must be in [1, 1048576]"),
    ("dqn.py", ["--n-step", HUGE], "--n-step", "must be in [1, 65536]"),
    ("dqn.py", ["--buffer-size", HUGE], "--buffer-size", "must be in [1, 1099511627776]"),
    ("dqn.py", ["--prioritized-replay-alpha", "2"], "--prioritized-replay-alpha", "must be in [0, 1]"),
    ("dqn.py", ["--buffer-size", "8", "--batch-size", "2", "--num-envs", "4"], "--buffer-size", "with --num-envs 4"),
    ("dqn.py", ["--total-timesteps", "5000"], "--learning-starts", "10000 leaves no training within --total-timesteps 5000"),
    ("dqn_atari.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("dqn_atari.py", ["--prioritized-replay-alpha", "1.5"], "--prioritized-replay-alpha", "must be in [0, 1]"),
    ("dqn_structured.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("c51.py", ["--n-atoms", HUGE], "--n-atoms", "must be in [2, 65536]"),
    ("c51.py", ["--num-envs", INT64ISH], "--num-envs", "must be in [1, 65536]"),
    ("c51.py", ["--v-min", "-1e39"], "--v-min", "(float32)"),
    ("c51.py", ["--v-max", "1e39"], "--v-max", "beyond float32's"),
    ("c51.py", ["--v-min", "-1e-320", "--v-max", "1e-320"], "--v-max", "is not above --v-min"),  # both 0 in float32
    ("c51_atari.py", ["--buffer-size", HUGE], "--buffer-size", "must be in [1, 1099511627776]"),
    ("rainbow_atari.py", ["--prioritized-replay-alpha", "1.5"], "--prioritized-replay-alpha", "must be in [0, 1]"),
    ("rainbow_atari.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    # DDPG, TD3, SAC: the replay's sizes
    ("ddpg_continuous.py", ["--batch-size", HUGE], "--batch-size", "must be in [1, 1048576]"),
    ("td3_continuous.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    ("td3_continuous.py", ["--policy-noise", "1e300"], "--policy-noise", "must be in [0, 1e6]"),
    ("ddpg_continuous.py", ["--exploration-noise", "1e300"], "--exploration-noise", "must be in [0, 1e6]"),
    ("sac_continuous.py", ["--buffer-size", HUGE], "--buffer-size", "must be in [1, 1099511627776]"),
    ("sac_atari.py", ["--num-envs", HUGE], "--num-envs", "must be in [1, 65536]"),
    # R2D2: PER's α, the actors' sizes
    ("r2d2_async.py", ["--priority-exponent", "1.5"], "--priority-exponent", "must be in [0, 1]"),
    ("r2d2_async.py", ["--num-actors", HUGE], "--num-actors", "must be in [1, 1024]"),
]


IDS = [f"{script} {' '.join(flags)[:40]}" for script, flags, *_ in CASES]


@pytest.mark.parametrize("script,flags,flag,message", CASES, ids=IDS)
def test_out_of_range_flag_is_refused_by_its_own_name(script, flags, flag, message, tmp_path):
    assert_stops_with_one_line(script, flags, flag, message, tmp_path)


def test_a_float_literal_for_an_int_flag_is_refused_by_its_name(tmp_path):
    """``--num-envs 1e20`` never reaches check_args: tyro reads ints with int(), and refuses it under --num-envs."""
    assert_stops_with_one_line("dqn.py", ["--num-envs", "1e20"], "--num-envs", "invalid literal for int()", tmp_path)


@pytest.mark.parametrize("script", ["ppo.py", "pqn.py"])
def test_a_refused_command_prints_no_rounding_notice_first(script, tmp_path):
    """--total-timesteps that is not a whole number of rollouts is rounded down with a notice, printed after every
    check: a command refused for another flag says one line and nothing else."""
    result = run_script(script, "--total-timesteps", "1000", "--env-id", "NoSuchEnv-v0", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "--env-id" in result.stderr and result.stdout == "", result.stdout


def test_envpool_suggests_atari_games_only(tmp_path):
    """A mistyped id gets the EnvPool Atari ids close to it, not its MuJoCo or other ids."""
    pytest.importorskip("envpool")
    result = run_script("pqn_atari_envpool.py", "--env-id", "Hoper-v5", cwd=tmp_path, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "unknown EnvPool Atari game 'Hoper-v5'" in lines[0], lines
    assert "Hopper" not in lines[0]
