"""plot-figure: the tidy tables' column contracts (:mod:`.tables`, importable without matplotlib, as
the workflow reads them at parse time) and the figures drawn from them (:mod:`.figures`)."""
