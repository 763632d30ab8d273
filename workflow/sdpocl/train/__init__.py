"""build-base and train-stage: the tiny base model (:mod:`.base`), the method registry
(:mod:`.methods`), the TRL trainer families (:mod:`.trainers`) and one stage of a run (:mod:`.stage`)."""
