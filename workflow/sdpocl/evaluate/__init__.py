"""evaluate-checkpoint and aggregate-eval: lm-eval task definitions (:mod:`.tasks`), the evaluation
of one checkpoint (:mod:`.run`), artifact metrics (:mod:`.artifacts`) and the tidy eval table
(:mod:`.aggregate`)."""
