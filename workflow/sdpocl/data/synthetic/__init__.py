"""The tiny preset's synthetic domains, one module per domain (:mod:`.math`, :mod:`.science`,
:mod:`.tooluse`, :mod:`.code`), what they share (:mod:`.common`), the registry and sampling
(:mod:`.sampling`) and the SFT warm-up (:mod:`.sft`); :mod:`sdpocl.data.domains` is their face."""
