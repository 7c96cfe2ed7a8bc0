"""W&B, checked before a run with ``--track`` makes its directory (loaded only with ``--track``)."""

from __future__ import annotations

import os

from cleanrl_utils.flags import fail


def wandb_login() -> None:
    """Log in to W&B as ``wandb.init`` would (``WANDB_API_KEY`` or ``wandb login``'s credentials; nothing to do under
    ``WANDB_MODE=offline``), so that a missing key is one line naming ``--track``, not a traceback from a started run.

    Raises:
        SystemExit: status 2, one line: W&B has no API key.
    """
    if os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):  # no key needed (wandb would warn)
        return
    import wandb

    try:
        wandb.login(verify=False)
    except wandb.errors.UsageError as error:
        fail("--track", f"W&B: {error} (or set WANDB_MODE=offline to log locally, for `wandb sync` later)")
