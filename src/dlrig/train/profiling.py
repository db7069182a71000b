"""`dlrig.train`'s `profile_steps`: dlrig.profile over a few of the run's own steps (the
optimizer's steps drive it), and its verdict in the run's log at the end."""

from __future__ import annotations

import os
from pathlib import Path

from dlrig import profile
from dlrig.train.log import RunLog
from dlrig.train.options import Options

# `dlrig train --profile-steps N` reaches the script through the environment.
ENV_STEPS = "DLRIG_TRAIN_PROFILE_STEPS"


def start(options: Options, log: RunLog) -> profile.Session | None:
    """A started session when the run asks for one (profile_steps, or the environment)."""
    steps = options.profile_steps
    if steps is None and os.environ.get(ENV_STEPS, "").isdigit():
        steps = int(os.environ[ENV_STEPS]) or None
    if steps is None:
        return None
    folder = options.profile_dir or (Path(options.log_dir) / "profile" if options.log_dir else None)
    session = profile.Session(steps=steps, out=folder)
    session.__enter__()
    log.decide(
        "profile", f"profiling {steps} steps from optimizer step {session.first_recorded_step} on"
    )
    return session


def finish(
    session: profile.Session, options: Options, log: RunLog, main: bool
) -> profile.ProfileReport | None:
    """End the session; the main rank says the verdict (each rank profiles itself)."""
    session.__exit__(None, None, None)
    report = session.report
    if not main:
        return report
    if report is None:
        log.say("profile: the run ended before its first profiled step")
        return None
    step = report.ranks[0].mean("step_ms")
    verdict = report.verdict
    if verdict is None:
        log.say(f"profile: {step:.1f} ms per step, no bottleneck worth a change")
    else:
        log.say(
            f"profile: {step:.1f} ms per step; {verdict.title} [{verdict.cause}], up to "
            f"x{verdict.gain:.2f}: {verdict.fix}"
        )
    if options.profile_dir or options.log_dir:
        log.say(f"profile: traces in {session.out} (dlrig profile {session.out}/*.gz)")
    return report
