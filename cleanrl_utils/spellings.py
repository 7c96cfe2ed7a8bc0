"""CleanRL's spellings of boolean flags (``--track True``, ``--cuda=false``), read as tyro's; loaded by
:func:`cleanrl_utils.flags.parse_args` only for a command line that has one."""

from __future__ import annotations

import dataclasses

from cleanrl_utils.flags import flag_name


def cleanrl_booleans(args_class: type, argv: list[str]) -> list[str]:
    """``argv`` with CleanRL's ``--track True`` / ``--cuda=false`` (any case) as tyro's ``--track`` / ``--no-cuda``."""
    flags = {flag_name(field.name) for field in dataclasses.fields(args_class) if type(field.default) is bool}
    out: list[str] = []
    for i, token in enumerate(argv):
        flag, equals, value = token.partition("=") if token.startswith("--") else (argv[i - 1] * (i > 0), "", token)
        if (flag := flag.replace("_", "-")) in flags and value.lower() in ("true", "false"):
            out = out if equals else out[:-1]  # the flag before its value
            token = flag if value.lower() == "true" else f"--no-{flag[2:]}"
        out.append(token)
    return out
