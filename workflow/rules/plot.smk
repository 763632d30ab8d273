"""plot-figure: one job per paper figure, reading only the tidy tables (never checkpoints)."""

for _figure, _tables in FIGURE_TABLES.items():

    rule:
        name:
            f"plot_{_figure}"
        input:
            [f"{RESULTS}/tables/{t}.csv" for t in _tables],
        output:
            [
                (
                    report(
                        f"{RESULTS}/figures/{_figure}.{fmt}",
                        caption=f"../report/{_figure}.rst",
                        category=FIGURE_CATEGORIES[_figure],
                    )
                    if fmt == "png"
                    else f"{RESULTS}/figures/{_figure}.{fmt}"
                )
                for fmt in config["plots"]["formats"]
            ]
            + ([f"{RESULTS}/figures/{_figure}.csv"] if _figure in FIGURE_DATA else []),
        log:
            f"{RESULTS}/logs/plot/{_figure}.log",
        localrule: True
        conda:
            "../../envs/sdpocl.yaml"
        params:
            figure=_figure,
            style=stable_json(config["plots"]),
            tables=lambda wc, input: os.path.dirname(input[0]),
            out=lambda wc, output: os.path.dirname(output[0]),
        shell:
            "sdpocl plot-figure --figure {params.figure} --tables {params.tables} --style {params.style:q} "
            "--out {params.out} > {log} 2>&1"
