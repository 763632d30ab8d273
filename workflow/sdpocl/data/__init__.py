"""prepare-data / prepare-benchmark: the tiny preset's synthetic domains (:mod:`.domains`) and OOD
benchmarks (:mod:`.benchmarks`), and the paper preset's loaders of real datasets (:mod:`.loaders`)."""
