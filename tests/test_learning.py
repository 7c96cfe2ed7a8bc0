"""Learning tests: each script, at its defaults, solves CartPole-v1 with a fixed seed.

Budget: the scripts' default 500k environment steps (ppo.py about 2 minutes, dqn.py and
c51.py about 5 minutes each on 2 cores). Select with ``pytest -m learning``; CI runs them (c51.py's is
marked ``long``: the README's test command leaves it out, CI runs it after that command).
"""

import numpy as np
import pytest

from tests.conftest import episodic_returns, run_dir, run_script

THRESHOLD = 475.0


@pytest.mark.learning
@pytest.mark.parametrize(
    "script", ["ppo.py", pytest.param("dqn.py", marks=pytest.mark.long), pytest.param("c51.py", marks=pytest.mark.long)]
)
def test_solves_cartpole(script, tmp_path):
    run_script(script, "--env-id", "CartPole-v1", "--seed", "1", "--total-timesteps", "500000", cwd=tmp_path, timeout=1500)
    returns = episodic_returns(run_dir(tmp_path))
    last20 = float(np.mean(returns[-20:]))
    print(f"{script}: mean return over the last 20 episodes {last20:.1f} ({len(returns)} episodes)")
    assert len(returns) >= 20
    assert last20 >= THRESHOLD
